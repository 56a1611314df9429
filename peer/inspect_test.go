package peer

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/shardlimiter/shardlimiter/internal/poll"
	"github.com/shardlimiter/shardlimiter/limit"
)

// TestInspectDoesNotSpend: inspecting a key, however often and under
// whatever rule, changes nothing a check then sees, on every algorithm;
// a key nobody holds is answered fresh and not created.
func TestInspectDoesNotSpend(t *testing.T) {
	t.Parallel()
	n, _ := newSingle(t)
	ctx := context.Background()
	for _, a := range limit.Algorithms() {
		r := rule(a, 10, time.Hour)
		if a == limit.LeakyBucket {
			r.Burst = 9 // a queue: more than one hit to spend
		}
		fresh := limit.Check{Name: "fresh", Key: a.String(), Rule: r}
		ref, _ := n.Check(ctx, []limit.Check{{Name: "reference", Key: a.String(), Rule: r}}) // a peek at a fresh key
		for range 3 {
			v, err := n.InspectLocal(ctx, fresh)
			if err != nil || v.Held || !v.Allowed || v.Remaining != ref[0].Remaining || v.Node != "solo" {
				t.Fatalf("%v: InspectLocal(fresh key) = %+v, %v, want not held, remaining %d", a, v, err, ref[0].Remaining)
			}
		}
		if got := n.limiters[a].Len(); got != 0 {
			t.Fatalf("%v: inspecting a fresh key created %d keys", a, got)
		}
		res, _ := n.Check(ctx, []limit.Check{{Name: "fresh", Key: a.String(), Hits: ref[0].Remaining, Rule: r}})
		if !res[0].Allowed {
			t.Errorf("%v: after inspections, a check of the full allowance = %+v, want admitted", a, res[0])
		}

		used := limit.Check{Name: "used", Key: a.String(), Hits: 3, Rule: r}
		first, _ := n.Check(ctx, []limit.Check{used})
		if !first[0].Allowed {
			t.Fatalf("%v: first check refused: %+v", a, first[0])
		}
		other := used
		other.Rule.Limit, other.Rule.Burst = 1000, 0 // a peek under this rule would rescale the key
		for _, c := range []limit.Check{used, other, used} {
			if _, err := n.InspectLocal(ctx, c); err != nil {
				t.Fatalf("%v: InspectLocal: %v", a, err)
			}
		}
		v, _ := n.InspectLocal(ctx, used)
		if !v.Held || v.Remaining != first[0].Remaining {
			t.Errorf("%v: InspectLocal(used) = %+v, want held, remaining %d", a, v, first[0].Remaining)
		}
		if a == limit.FixedWindow || a == limit.SlidingWindow || a == limit.SlidingLog {
			if v.Current != 3 {
				t.Errorf("%v: InspectLocal(used).Current = %d, want 3", a, v.Current)
			}
		}
		rest := used
		rest.Hits = first[0].Remaining
		res, _ = n.Check(ctx, []limit.Check{rest})
		if !res[0].Allowed {
			t.Errorf("%v: after inspections, the %d hits left = %+v, want admitted", a, rest.Hits, res[0])
		}
		rest.Hits = 1
		if res, _ = n.Check(ctx, []limit.Check{rest}); res[0].Allowed {
			t.Errorf("%v: one hit past the capacity admitted: %+v", a, res[0])
		}
	}
	if _, err := n.InspectLocal(ctx, limit.Check{Name: "x", Key: "", Rule: rule(limit.TokenBucket, 1, time.Second)}); err == nil {
		t.Error("InspectLocal without a key: no error")
	}
}

// TestInspectAsksTheOwner: a node asked about a key another node owns
// answers with the owner's state (and the replica holder's), read over the
// peer port, without spending.
func TestInspectAsksTheOwner(t *testing.T) {
	t.Parallel()
	c := newTestCluster(t, 3, Config{ReplicationInterval: 10 * time.Millisecond})
	entry := c.running()[0]
	ctx := context.Background()
	r := rule(limit.FixedWindow, 10, time.Hour)
	var check limit.Check
	var owner string
	for i := 0; owner == "" || owner == entry.name; i++ {
		check = limit.Check{Name: "api", Key: fmt.Sprint("account:", i), Hits: 3, Rule: r}
		owner = entry.node.view.Load().snap.Owner(check.Key).Name
	}
	if res := c.check(entry, check); !res[0].Allowed || res[0].Owner != owner {
		t.Fatalf("check = %+v, want admitted by %s", res[0], owner)
	}
	var in limit.Inspection
	poll.Until(t, 5*time.Second, func() bool {
		var err error
		if in, err = entry.node.Inspect(ctx, check); err != nil {
			t.Fatal(err)
		}
		return in.Replica.Held // replication has run
	}, "the replica holder holds the key")
	if in.Owner.Node != owner || !in.Owner.Held || in.Owner.Remaining != 7 || in.Owner.Current != 3 || in.Owner.Error != "" {
		t.Errorf("Inspect owner view = %+v, want %s holding 3 of 10", in.Owner, owner)
	}
	if in.Replica.Node == owner || in.Replica.Node == "" || in.Replica.Remaining != 7 {
		t.Errorf("Inspect replica view = %+v, want another node with remaining 7", in.Replica)
	}
	for range 5 {
		if _, err := entry.node.Inspect(ctx, check); err != nil {
			t.Fatal(err)
		}
	}
	check.Hits = 7
	if res := c.check(entry, check); !res[0].Allowed || res[0].Remaining != 0 {
		t.Errorf("after inspections, the rest = %+v, want admitted with 0 left", res[0])
	}
	check.Hits = 1
	if res := c.check(entry, check); res[0].Allowed {
		t.Errorf("one hit past the limit admitted: %+v", res[0])
	}
}
