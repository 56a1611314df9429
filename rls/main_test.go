package rls

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	ratelimitpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"

	"github.com/shardlimiter/shardlimiter/limit"
	"github.com/shardlimiter/shardlimiter/rules"
)

// t0 is the instant the tests' service reads from its clock.
var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// testRules has one rule of each kind the service treats apart.
const testRules = `
domain: d
descriptors:
  - key: k
    rate_limit: {unit: minute, requests_per_unit: 10, name: per_min}
  - key: free
    rate_limit: {unlimited: true}
  - key: shadow
    shadow_mode: true
    rate_limit: {unit: second, requests_per_unit: 1, name: shadowed}
  - key: tiered
    rate_limits:
      - {unit: second, requests_per_unit: 5, name: tier_sec}
      - {unit: hour, requests_per_unit: 100, name: tier_hour, algorithm: sliding_log}
  - key: new
    rate_limit:
      unit: minute
      requests_per_unit: 3
      name: new_min
      replaces: [{name: per_min}]
  - key: blocked
    rate_limit: {unit: minute, requests_per_unit: 0, name: none}
  - key: anon
    rate_limit: {unit: hour, requests_per_unit: 4}
`

// fakeChecker records the checks it is asked and answers each from
// answers by name, or admits it with Remaining = Limit - Hits and a reset
// 30 s after t0.
type fakeChecker struct {
	answers map[string]limit.Result
	err     error

	mu    sync.Mutex
	calls [][]limit.Check
}

func (f *fakeChecker) Check(_ context.Context, checks []limit.Check) ([]limit.Result, error) {
	f.mu.Lock()
	f.calls = append(f.calls, slices.Clone(checks))
	f.mu.Unlock()
	if f.err != nil {
		return nil, f.err
	}
	out := make([]limit.Result, len(checks))
	for i, c := range checks {
		if r, ok := f.answers[c.Name]; ok {
			out[i] = r
			continue
		}
		out[i] = limit.Result{Decision: limit.Decision{Allowed: true, Remaining: c.Rule.Limit - c.Hits,
			ResetAt: t0.Add(30 * time.Second).UnixNano()}, Owner: "n1"}
	}
	return out, nil
}

// newTestService is a Service on testRules and f, its clock stopped at t0.
func newTestService(t *testing.T, f *fakeChecker, headers bool) *Service {
	t.Helper()
	set, err := rules.Parse("rules.yaml", []byte(testRules))
	if err != nil {
		t.Fatal(err)
	}
	return New(Config{Checker: f, Rules: rules.NewStore(set), Headers: headers, Now: func() time.Time { return t0 }})
}

func entries(kv ...string) *ratelimitpb.RateLimitDescriptor {
	d := &ratelimitpb.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &ratelimitpb.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}
