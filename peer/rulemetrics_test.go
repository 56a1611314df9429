package peer

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/shardlimiter/shardlimiter/limit"
	"github.com/shardlimiter/shardlimiter/peer/rulemetrics"
)

// ruleSeries gathers reg's per-rule checks by rule and outcome, and hits by rule.
func ruleSeries(t *testing.T, reg prometheus.Gatherer) (checks map[[2]string]float64, hits map[string]float64) {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	checks, hits = map[[2]string]float64{}, map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			switch mf.GetName() {
			case "shardlimiter_rule_checks_total":
				checks[[2]string{labels["rule"], labels["outcome"]}] += m.GetCounter().GetValue()
			case "shardlimiter_rule_hits_total":
				hits[labels["rule"]] += m.GetCounter().GetValue()
			}
		}
	}
	return checks, hits
}

func gauge(t *testing.T, reg prometheus.Gatherer, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			m := mf.GetMetric()[0]
			if m.GetCounter() != nil {
				return m.GetCounter().GetValue()
			}
			return m.GetGauge().GetValue()
		}
	}
	t.Fatalf("no metric %s", name)
	return 0
}

// TestRuleMetricsCountDecisions: after a known sequence of checks on one
// node, the per-rule counters equal the decisions it answered.
func TestRuleMetricsCountDecisions(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	t0 := time.Unix(1_700_000_000, 0)
	n, err := New(Config{Name: "solo", Registerer: reg, Now: func() time.Time { return t0 }})
	if err != nil {
		t.Fatal(err)
	}
	rule := limit.Rule{Algorithm: limit.FixedWindow, Limit: 10, Period: time.Hour}
	want := map[[2]string]float64{}
	wantHits := map[string]float64{}
	send := func(name string, hits int64) {
		res, err := n.Check(context.Background(), []limit.Check{{Name: name, Key: "account:1", Hits: hits, Rule: rule}})
		if err != nil || res[0].Error != "" {
			t.Fatalf("Check(%s, %d) = %+v, %v", name, hits, res, err)
		}
		d := res[0].Decision
		o := "under"
		switch {
		case hits == 0:
			o = "peek"
		case !d.Allowed:
			o = "over"
		case float64(d.Remaining) < 0.2*float64(rule.Limit):
			o = "near"
		}
		want[[2]string{name, o}]++
		if d.Allowed {
			wantHits[name] += float64(hits)
		}
	}
	for range 12 {
		send("api", 1)
	}
	send("api", 0)
	send("login", 3)
	send("login", 8) // over: 7 left
	send("login", 6) // 1 left: near
	// A group: counted once per check, with the group's outcome.
	res, _ := n.Check(context.Background(), []limit.Check{
		{Name: "g1", Key: "k", Hits: 1, Rule: rule, Chained: true},
		{Name: "g2", Key: "k", Hits: 11, Rule: rule},
	})
	if res[0].Allowed || res[1].Allowed {
		t.Fatalf("group over the limit admitted: %+v", res)
	}
	want[[2]string{"g1", "over"}]++
	want[[2]string{"g2", "over"}]++

	if want[[2]string{"api", "near"}] != 2 || want[[2]string{"api", "over"}] != 2 || want[[2]string{"api", "under"}] != 8 {
		t.Fatalf("the sequence did not produce the outcomes it is meant to test: %v", want)
	}
	checks, hits := ruleSeries(t, reg)
	for k, v := range want {
		if checks[k] != v {
			t.Errorf("rule_checks_total%v = %v, want %v", k, checks[k], v)
		}
	}
	for k, v := range checks {
		if v != want[k] {
			t.Errorf("rule_checks_total%v = %v, want %v", k, v, want[k])
		}
	}
	for k, v := range wantHits {
		if hits[k] != v {
			t.Errorf("rule_hits_total{rule=%q} = %v, want %v", k, hits[k], v)
		}
	}
}

// TestRuleMetricsCountedOnceOnTheOwner: checks sent through one node of
// three are counted once, on the node that decided each (its owner).
func TestRuleMetricsCountedOnceOnTheOwner(t *testing.T) {
	t.Parallel()
	regs := map[string]*prometheus.Registry{}
	var mu sync.Mutex
	c := newTestClusterWith(t, 3, Config{}, func(cfg *Config) {
		reg := prometheus.NewRegistry()
		mu.Lock()
		regs[cfg.Name] = reg
		mu.Unlock()
		cfg.Registerer = reg
	})
	rule := limit.Rule{Algorithm: limit.TokenBucket, Limit: 3, Period: time.Hour}
	entry := c.running()[0]
	decided := map[string]map[[2]string]float64{} // by owner
	for i := range 60 {
		checks := []limit.Check{{Name: "api", Key: fmt.Sprint("account:", i%20), Hits: 1, Rule: rule}}
		res := c.check(entry, checks...)
		if res[0].Error != "" {
			t.Fatalf("check %d: %+v", i, res[0])
		}
		o := "under"
		if !res[0].Allowed {
			o = "over"
		} else if res[0].Remaining*5 < rule.Limit {
			o = "near"
		}
		if decided[res[0].Owner] == nil {
			decided[res[0].Owner] = map[[2]string]float64{}
		}
		decided[res[0].Owner][[2]string{"api", o}]++
	}
	if len(decided) < 2 {
		t.Fatalf("all 20 keys decided by %v: the test needs keys owned elsewhere", decided)
	}
	total := 0.0
	for name, reg := range regs {
		checks, _ := ruleSeries(t, reg)
		for _, o := range []string{"under", "near", "over", "peek"} {
			k := [2]string{"api", o}
			if checks[k] != decided[name][k] {
				t.Errorf("%s: rule_checks_total%v = %v, want %v (the checks it decided)", name, k, checks[k], decided[name][k])
			}
			total += checks[k]
		}
	}
	if total != 60 {
		t.Errorf("checks counted over the cluster = %v, want 60 (each once)", total)
	}
}

// TestRuleMetricsCap: a flood of distinct names gets at most
// MetricsMaxRules series; the rest are counted under "other".
func TestRuleMetricsCap(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	n, err := New(Config{Name: "solo", Registerer: reg, MetricsMaxRules: 5})
	if err != nil {
		t.Fatal(err)
	}
	rule := limit.Rule{Algorithm: limit.TokenBucket, Limit: 100, Period: time.Second}
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			batch := make([]limit.Check, 125)
			for i := range batch {
				batch[i] = limit.Check{Name: fmt.Sprintf("name-%d-%d", w, i), Key: "k", Hits: 1, Rule: rule}
			}
			if _, err := n.Check(context.Background(), batch); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	checks, hits := ruleSeries(t, reg)
	rules := map[string]bool{}
	total := 0.0
	for k, v := range checks {
		rules[k[0]] = true
		total += v
	}
	if len(rules) != 6 || !rules[rulemetrics.OtherRule] {
		t.Errorf("rule label values = %v, want 5 names and %q", rules, rulemetrics.OtherRule)
	}
	if total != 1000 {
		t.Errorf("checks counted = %v, want 1000", total)
	}
	if got := checks[[2]string{rulemetrics.OtherRule, "under"}]; got != 995 {
		t.Errorf("checks under %q = %v, want 995", rulemetrics.OtherRule, got)
	}
	if got := hits[rulemetrics.OtherRule]; got != 995 {
		t.Errorf("hits under %q = %v, want 995", rulemetrics.OtherRule, got)
	}
	if got := gauge(t, reg, "shardlimiter_rule_folded_checks_total"); got != 995 {
		t.Errorf("folded checks = %v, want 995", got)
	}
	if got := gauge(t, reg, "shardlimiter_rule_names"); got != 5 {
		t.Errorf("rule names = %v, want 5", got)
	}
}
