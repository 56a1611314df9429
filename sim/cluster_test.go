package sim

import (
	"context"
	"testing"
	"time"

	"github.com/shardlimiter/shardlimiter/internal/poll"
	"github.com/shardlimiter/shardlimiter/limit"
	"github.com/shardlimiter/shardlimiter/ring"
)

// agreeWithin bounds the waits for the members to agree on a ring. They
// agree in 2-3 s alone (a crash: memberlist's suspicion); the bound is for
// a loaded machine, where every member of a cluster shares the test's CPU
// with the rest of the suite (20 s was once too short under -race). The
// cluster tests run one at a time for the same reason.
const agreeWithin = 60 * time.Second

// newCluster forms a cluster of n members, stopped when the test ends.
func newCluster(t *testing.T, n int, opt Options) *Cluster {
	t.Helper()
	c := NewCluster(opt)
	t.Cleanup(c.Stop)
	if _, err := c.Form(n, agreeWithin); err != nil {
		t.Fatal(err)
	}
	return c
}

// spentOn returns the hits the member called name holds counted on key in
// its own table.
func spentOn(t *testing.T, c *Cluster, name, key string) int64 {
	t.Helper()
	for _, m := range c.Running() {
		if m.Name != name {
			continue
		}
		v, err := m.Node.InspectLocal(context.Background(), limit.Check{Name: "sim", Key: key, Rule: Rule})
		if err != nil {
			t.Fatal(err)
		}
		return Rule.Burst - v.Remaining
	}
	t.Fatalf("no member called %s", name)
	return 0
}

// Three members, 300 keys of one hit each; a fourth joins. Every member
// then routes by the one ring of the four, every key is owned by exactly
// one member (every member's ring names the same owner), and that owner
// holds the key's hit (the old owner may keep a stale copy: it is not
// deleted at the handoff, and decides nothing).
func TestJoinLeavesOneRingAndOneOwnerPerKey(t *testing.T) {
	ctx := context.Background()
	c := newCluster(t, 3, Options{Seed: 1})
	keys := Keys(c.Rand, 300)
	if err := c.Fill(ctx, keys, 100); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if _, err := c.Start(); err != nil {
		t.Fatal(err)
	}
	if _, err := c.WaitAgree(start, agreeWithin); err != nil {
		t.Fatal(err)
	}
	if got := len(c.Running()[0].Node.Ring().Names); got != 4 {
		t.Fatalf("ring of %d members after the join, want 4", got)
	}
	rings := make([]*ring.Snapshot, 0, 4)
	for _, m := range c.Running() {
		ms := m.Node.Membership()
		snap, err := ring.New(ms.Members, 0, ms.Config)
		if err != nil {
			t.Fatal(err)
		}
		rings = append(rings, snap)
	}
	moved := 0
	for _, k := range keys {
		owner := rings[0].Owner(k).Name
		for i, r := range rings[1:] {
			if o := r.Owner(k).Name; o != owner {
				t.Fatalf("key %q: %s's ring names %s its owner, %s's names %s", k, c.Running()[0].Name, owner, c.Running()[i+1].Name, o)
			}
		}
		// The pull of a partition the new member gained may still be on
		// its way: wait for the owner to hold the key's hit.
		poll.Until(t, 10*time.Second, func() bool { return spentOn(t, c, owner, k) == 1 },
			"key %q: 1 hit counted on its owner %s", k, owner)
		if owner == c.Running()[3].Name {
			moved++
		}
	}
	if moved == 0 {
		t.Fatalf("the new member holds none of %d keys: the join moved nothing", len(keys))
	}
	t.Logf("the join moved %d of %d keys", moved, len(keys))
}

// Five members with replication; keys of 1 to 3 hits; the member owning
// the first key leaves gracefully. The four left agree on their ring and
// every key's count is exactly what was sent: nothing lost, nothing
// doubled, through the leave.
func TestLeaveKeepsCountsExact(t *testing.T) {
	ctx := context.Background()
	c := newCluster(t, 5, Options{Seed: 2})
	keys := Keys(c.Rand, 200)
	want := map[string]int64{}
	for round := range 3 {
		if err := c.Fill(ctx, keys[:len(keys)-round*50], 50); err != nil {
			t.Fatal(err)
		}
		for _, k := range keys[:len(keys)-round*50] {
			want[k]++
		}
	}
	in, err := c.Running()[0].Node.Inspect(ctx, limit.Check{Name: "sim", Key: keys[0], Rule: Rule})
	if err != nil {
		t.Fatal(err)
	}
	var leaving *Member
	for _, m := range c.Running() {
		if m.Name == in.Owner.Node {
			leaving = m
		}
	}
	start := time.Now()
	if err := c.Leave(leaving); err != nil {
		t.Fatal(err)
	}
	if _, err := c.WaitAgree(start, agreeWithin); err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		m := c.Pick()
		got, err := c.Spent(ctx, m, k)
		if err != nil {
			t.Fatal(err)
		}
		if got != want[k] {
			t.Fatalf("key %q after %s left: %d hits counted (asked %s), want %d", k, leaving.Name, got, m.Name, want[k])
		}
	}
}

// A crashed member is declared dead by gossip and dropped from every
// survivor's ring; a partition into halves gives each half a ring of its
// own, and the heal one ring of all again.
func TestCrashAndPartitionConverge(t *testing.T) {
	c := newCluster(t, 5, Options{Seed: 3})
	start := time.Now()
	c.Crash(c.Running()[2])
	took, err := c.WaitAgree(start, agreeWithin)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("crash declared and rings rebuilt in %v", took)
	start = time.Now()
	a, b := c.Partition()
	if _, err := c.WaitAgreeOn(a, start, agreeWithin); err != nil {
		t.Fatalf("half %d: %v", len(a), err)
	}
	if _, err := c.WaitAgreeOn(b, start, agreeWithin); err != nil {
		t.Fatalf("half %d: %v", len(b), err)
	}
	start = time.Now()
	c.Heal(a, b)
	if _, err := c.WaitAgree(start, 30*time.Second); err != nil {
		t.Fatalf("after the heal: %v", err)
	}
}
