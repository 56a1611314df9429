package rules

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/shardlimiter/shardlimiter/limit"
)

// checkerFunc is a Checker made of a function.
type checkerFunc func(context.Context, []limit.Check) ([]limit.Result, error)

func (f checkerFunc) Check(ctx context.Context, checks []limit.Check) ([]limit.Result, error) {
	return f(ctx, checks)
}

// An item with limit 0 names a rule of the rules file. Its error says what
// is missing: the rule, or (a node without --config) any rules file at
// all, never a rules file that does not exist. The other items are decided.
func TestByNameErrors(t *testing.T) {
	t.Parallel()
	set, err := Parse("rules.yaml", []byte(`
domain: d
descriptors:
  - key: k
    rate_limit: {name: known, unit: minute, requests_per_unit: 5}
`))
	if err != nil {
		t.Fatal(err)
	}
	next := checkerFunc(func(_ context.Context, checks []limit.Check) ([]limit.Result, error) {
		out := make([]limit.Result, len(checks))
		for i := range out {
			out[i].Allowed, out[i].Remaining = true, checks[i].Rule.Limit-checks[i].Hits
		}
		return out, nil
	})
	own := limit.Check{Name: "own", Key: "a", Hits: 1, Rule: limit.Rule{Limit: 3, Period: time.Second}}
	for _, tc := range []struct {
		name    string
		store   *Store
		want    string
		notWant string
	}{
		{"no --config", NewStore(nil), "this node has no rules file (--config)", "in the rules file"},
		{"rules loaded", NewStore(set), `no rule is named "unknown" in the rules file`, "no rules file"},
	} {
		b := ByName{Rules: tc.store, Next: next}
		res, err := b.Check(context.Background(), []limit.Check{own, {Name: "unknown", Key: "b", Hits: 1}})
		if err != nil || len(res) != 2 {
			t.Fatalf("%s: Check = %+v, %v", tc.name, res, err)
		}
		if res[0].Error != "" || !res[0].Allowed || res[0].Remaining != 2 {
			t.Errorf("%s: the item with its own rule = %+v, want it decided", tc.name, res[0])
		}
		if e := res[1].Error; !strings.Contains(e, tc.want) || strings.Contains(e, tc.notWant) || res[1].Reason != limit.Invalid {
			t.Errorf("%s: error %q (reason %v), want it to contain %q and not %q", tc.name, e, res[1].Reason, tc.want, tc.notWant)
		}
	}
}
