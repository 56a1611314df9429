package sim

import (
	"context"
	"slices"
	"testing"
	"testing/synctest"
	"time"
)

// virtualN is the cluster size of the virtual-time test: past 60 members
// a cluster in real time flaps on this machine (docs/SCALING.md); in a
// synctest bubble no timeout fires because a member was starved of CPU.
const virtualN = 50

// virtualAgreeWithin bounds, in virtual time, the waits for agreement of
// the virtual-time tests. Forming a cluster all at once can wait for
// memberlist's push/pull when a broadcast was missed: 45-160 s at a few
// hundred members (docs/SCALING.md), and 60 s was once too short at 50
// in CI. A virtual wait costs only the CPU of what runs meanwhile.
const virtualAgreeWithin = 3 * time.Minute

// In virtual time (a synctest bubble) 50 members form one ring, and after
// a join, a crash and a leave every member agrees on the ring of the
// members running, which names exactly them; the keys entered before keep
// their counts through the leave. The times are logged, not asserted:
// they are memberlist's, in virtual time.
func TestVirtualClusterAgreesAfterJoinCrashLeave(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := NewCluster(Options{Seed: 4})
		defer time.Sleep(GossipDrain) // runs after Stop: memberlist's goroutines exit
		defer c.Stop()
		formed, err := c.Form(virtualN, virtualAgreeWithin)
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		keys := Keys(c.Rand, 500)
		if err := c.Fill(ctx, keys, 100); err != nil {
			t.Fatal(err)
		}
		joined := virtualEvent(t, c, "join", func() {
			if _, err := c.Start(); err != nil {
				t.Fatal(err)
			}
		})
		crashed := virtualEvent(t, c, "crash", func() { c.Crash(c.Running()[7]) })
		left := virtualEvent(t, c, "leave", func() {
			if err := c.Leave(c.Running()[11]); err != nil {
				t.Fatal(err)
			}
		})
		t.Logf("%d members in virtual time: formed in %v; one ring after a join in %v, a crash in %v, a leave in %v",
			virtualN, formed, joined, crashed, left)
		for _, k := range keys {
			m := c.Pick()
			got, err := c.Spent(ctx, m, k)
			if err != nil {
				t.Fatal(err)
			}
			if got != 1 {
				t.Fatalf("key %q after a join, a crash and a leave: %d hits counted (asked %s), want 1", k, got, m.Name)
			}
		}
	})
}

// virtualEvent runs event and waits until every running member routes by
// a ring of exactly the running members, and returns how long that took
// in virtual time.
func virtualEvent(t *testing.T, c *Cluster, name string, event func()) time.Duration {
	t.Helper()
	before := c.Running()
	start := time.Now()
	event()
	took, err := c.WaitAgree(start, virtualAgreeWithin)
	if err != nil {
		t.Fatalf("after the %s: %v", name, err)
	}
	want := make([]string, 0, len(before)+1)
	for _, m := range c.Running() {
		want = append(want, m.Name)
	}
	slices.Sort(want)
	if got := ringNames(c.Running()[0]); !slices.Equal(got, want) || len(want) == len(before) {
		t.Fatalf("after the %s: ring of %d members %v, want the %d running (%d before)", name, len(got), got, len(want), len(before))
	}
	return took
}

// With Options.GossipOnly, members run gossip alone and agree on their
// member lists: after a join, a crash and a leave every member lists
// exactly the running members.
func TestVirtualGossipOnlyAgreesAfterJoinCrashLeave(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := NewCluster(Options{Seed: 5, GossipOnly: true})
		defer time.Sleep(GossipDrain)
		defer c.Stop()
		if _, err := c.Form(20, virtualAgreeWithin); err != nil {
			t.Fatal(err)
		}
		joined := virtualEvent(t, c, "join", func() {
			if _, err := c.Start(); err != nil {
				t.Fatal(err)
			}
		})
		crashed := virtualEvent(t, c, "crash", func() { c.Crash(c.Running()[3]) })
		left := virtualEvent(t, c, "leave", func() {
			if err := c.Leave(c.Running()[5]); err != nil {
				t.Fatal(err)
			}
		})
		for _, m := range c.Running() {
			if m.Node != nil {
				t.Fatalf("member %s runs a node with GossipOnly", m.Name)
			}
		}
		t.Logf("20 members, gossip only, virtual time: one member list after a join in %v, a crash in %v, a leave in %v", joined, crashed, left)
	})
}

// A static cluster (Params.Static) forms one ring without gossip and
// forwards checks across it; scenarios that change membership are
// refused on it, and forward and replicate on a gossip-only cluster.
func TestStaticFormsAndForwards(t *testing.T) {
	t.Parallel()
	r, err := Run(context.Background(), Options{Seed: 6}, Params{N: 5, K: 1000, Static: true,
		Scenarios: []string{"forward", "join"}, Batches: 20})
	if err != nil {
		t.Fatal(err)
	}
	if r.ForwardMsgs < 2 || r.ForwardMsgs > 5 {
		t.Errorf("%.1f forwards per batch of 100 entering one of 5 members, want 2-5", r.ForwardMsgs)
	}
	if r.ForwardPerCheck <= 0 {
		t.Errorf("time per forwarded check %v: not measured", r.ForwardPerCheck)
	}
	if len(r.Errors) != 1 || r.Join != 0 {
		t.Errorf("join on a static ring: errors %q, join %v; want it refused", r.Errors, r.Join)
	}
	if err := runnable("forward", Options{GossipOnly: true}, Params{}); err == nil {
		t.Error("forward on a gossip-only cluster: not refused")
	}
}

// ringNames returns the members m routes by, or with GossipOnly lists.
func ringNames(m *Member) []string {
	if m.Node != nil {
		return m.Node.Ring().Names
	}
	var out []string
	for _, x := range m.Gossip.Members() {
		out = append(out, x.Name)
	}
	return out
}
