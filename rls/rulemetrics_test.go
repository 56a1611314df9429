package rls_test

import (
	"context"
	"math"
	"testing"
	"time"

	ratelimitpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/shardlimiter/shardlimiter/peer"
	"github.com/shardlimiter/shardlimiter/rls"
	"github.com/shardlimiter/shardlimiter/rules"
)

// series gathers reg's values of name by their labels (a label=value list).
func series(t *testing.T, reg *prometheus.Registry, name string) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			key := ""
			for _, l := range m.GetLabel() {
				key += l.GetName() + "=" + l.GetValue() + " "
			}
			v := m.GetCounter().GetValue()
			if m.GetGauge() != nil {
				v = m.GetGauge().GetValue()
			}
			out[key] = v
		}
	}
	return out
}

// TestRuleStats: after a known sequence of requests, the per-rule
// statistics are envoyproxy/ratelimit's: every hit in total_hits, the hits
// of refused descriptors in over_limit (and shadow_mode for a shadow
// rule), the others in within_limit, and of those the hits past 80% of the
// limit in near_limit; detailed_metric rules per value up to the cap.
func TestRuleStats(t *testing.T) {
	t.Parallel()
	set, err := rules.Parse("rules.yaml", []byte(`
domain: d
descriptors:
  - key: k
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: s
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 2, name: shadowed}
  - key: det
    detailed_metric: true
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: b
    rate_limit: {unit: minute, requests_per_unit: 0, name: blocked}
`))
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2026, 3, 1, 12, 0, 10, 0, time.UTC)
	node, err := peer.New(peer.Config{Name: "solo", Now: func() time.Time { return t0 }})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	svc := rls.New(rls.Config{Checker: node, Rules: rules.NewStore(set), Registerer: reg, MetricsMaxDetailed: 1})
	ask := func(key, value string, hits uint32) rlspb.RateLimitResponse_Code {
		t.Helper()
		resp, err := svc.ShouldRateLimit(context.Background(), &rlspb.RateLimitRequest{Domain: "d", HitsAddend: hits,
			Descriptors: []*ratelimitpb.RateLimitDescriptor{{Entries: []*ratelimitpb.RateLimitDescriptor_Entry{{Key: key, Value: value}}}}})
		if err != nil {
			t.Fatal(err)
		}
		return resp.Statuses[0].Code
	}
	for i := range 12 { // counts 1..12 of 10: 9 and 10 near, 11 and 12 over
		want := rlspb.RateLimitResponse_OK
		if i >= 10 {
			want = rlspb.RateLimitResponse_OVER_LIMIT
		}
		if got := ask("k", "a", 1); got != want {
			t.Fatalf("k=a request %d: %v, want %v", i+1, got, want)
		}
	}
	ask("k", "b", 3) // count 3: within
	ask("k", "b", 7) // 3 → 10: within, 2 of them past 8
	for range 3 {    // limit 2 in shadow mode: the third is over, answered OK
		if got := ask("s", "x", 1); got != rlspb.RateLimitResponse_OK {
			t.Fatalf("shadow rule answered %v", got)
		}
	}
	ask("det", "x", 1) // the one detailed series
	ask("det", "y", 1) // past the cap: under the rule's name
	ask("b", "x", 2)   // requests_per_unit 0: over

	want := map[string]float64{
		"domain=d rule=d.k stat=total_hits ":      22,
		"domain=d rule=d.k stat=within_limit ":    20,
		"domain=d rule=d.k stat=near_limit ":      4,
		"domain=d rule=d.k stat=over_limit ":      2,
		"domain=d rule=d.k stat=shadow_mode ":     0,
		"domain=d rule=shadowed stat=total_hits ": 3, "domain=d rule=shadowed stat=within_limit ": 2,
		"domain=d rule=shadowed stat=near_limit ": 1, "domain=d rule=shadowed stat=over_limit ": 1,
		"domain=d rule=shadowed stat=shadow_mode ": 1,
		"domain=d rule=d.det_x stat=total_hits ":   1, "domain=d rule=d.det_x stat=within_limit ": 1,
		"domain=d rule=d.det_x stat=near_limit ": 0, "domain=d rule=d.det_x stat=over_limit ": 0,
		"domain=d rule=d.det_x stat=shadow_mode ": 0,
		"domain=d rule=d.det stat=total_hits ":    1, "domain=d rule=d.det stat=within_limit ": 1,
		"domain=d rule=d.det stat=near_limit ": 0, "domain=d rule=d.det stat=over_limit ": 0,
		"domain=d rule=d.det stat=shadow_mode ":  0,
		"domain=d rule=blocked stat=total_hits ": 2, "domain=d rule=blocked stat=over_limit ": 2,
		"domain=d rule=blocked stat=within_limit ": 0, "domain=d rule=blocked stat=near_limit ": 0,
		"domain=d rule=blocked stat=shadow_mode ": 0,
	}
	got := series(t, reg, "shardlimiter_rls_rule_hits_total")
	for k, v := range want {
		if got[k] != v {
			t.Errorf("shardlimiter_rls_rule_hits_total{%s} = %v, want %v", k, got[k], v)
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			t.Errorf("unexpected series {%s}", k)
		}
	}
	if f := series(t, reg, "shardlimiter_rls_detailed_folded_total")[""]; f != 1 {
		t.Errorf("detailed_folded_total = %v, want 1", f)
	}
	limits := series(t, reg, "shardlimiter_rules_limit_per_second")
	for k, v := range map[string]float64{"domain=d rule=d.k ": 10.0 / 60, "domain=d rule=shadowed ": 2.0 / 60, "domain=d rule=d.det ": 5.0 / 60, "domain=d rule=blocked ": 0} {
		if math.Abs(limits[k]-v) > 1e-9 {
			t.Errorf("shardlimiter_rules_limit_per_second{%s} = %v, want %v", k, limits[k], v)
		}
	}
	if len(limits) != 4 {
		t.Errorf("limit gauges: %v, want 4", limits)
	}
}
