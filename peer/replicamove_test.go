package peer

import (
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/shardlimiter/shardlimiter/bucket"
	"github.com/shardlimiter/shardlimiter/internal/poll"
	"github.com/shardlimiter/shardlimiter/limit"
	"github.com/shardlimiter/shardlimiter/ring"
	"github.com/shardlimiter/shardlimiter/table"
)

// viewOf is self's view of a ring of names, built as a node builds it.
func viewOf(t testing.TB, self string, names ...string) *view {
	t.Helper()
	var ms []ring.Member
	for _, n := range names {
		ms = append(ms, ring.Member{Name: n})
	}
	snap, err := ring.New(ms, 1, ring.Config{})
	if err != nil {
		t.Fatal(err)
	}
	v := &view{snap: snap, self: snap.IndexOf(self)}
	if v.self >= 0 && snap.Len() > 1 {
		if v.backup, err = snap.Without(self); err != nil {
			t.Fatal(err)
		}
	}
	return v
}

// holder is the replica holder of partition p in v: its owner without v's
// node; "" when there is none.
func holder(v *view, p int) string {
	if v.backup == nil {
		return ""
	}
	return v.backup.Member(v.backup.PartitionOwner(p)).Name
}

// TestReplicaMoveReachesNewHolder: keys spent on their owner and
// replicated, then never checked again, reach the node a join makes their
// replica holder (the owner stays); when the owner crashes, that node
// continues their exact counts.
func TestReplicaMoveReachesNewHolder(t *testing.T) {
	t.Parallel()
	clk := newClock()
	c := newTestCluster(t, 3, Config{Now: clk.Now, ReplicationInterval: 10 * time.Millisecond, Peer: exactPeer})
	owner := c.running()[0]
	three := viewOf(t, owner.name, "node-0", "node-1", "node-2")
	four := viewOf(t, owner.name, "node-0", "node-1", "node-2", "node-3")
	var keys []string
	for _, k := range testKeys(2000) {
		p := three.snap.PartitionOf(k)
		if three.snap.Owner(k).Name == owner.name && four.snap.Owner(k).Name == owner.name && holder(four, p) == "node-3" {
			keys = append(keys, k)
		}
	}
	if len(keys) < 10 {
		t.Fatalf("%d keys keep node-0 and move their replica to node-3: the test proves little", len(keys))
	}
	r := rule(limit.FixedWindow, 10, time.Hour)
	before := c.degraded()
	c.assertExact("before the join", c.spend(owner, keys, r, 6), 6*len(keys), before)
	byName := map[string]*testNode{}
	for _, tn := range c.running() {
		byName[tn.name] = tn
	}
	// replicated reports whether each key's state on its holder in v (a
	// node of byName) is its owner's.
	replicated := func(v *view) bool {
		now := clk.Now().UnixNano()
		for _, k := range keys {
			var kb keyBuf
			tk := kb.key("quota", k)
			want, _ := owner.node.limiters[limit.FixedWindow].Export(tk, now)
			got, _ := byName[holder(v, v.snap.PartitionOf(k))].node.limiters[limit.FixedWindow].Export(tk, now)
			if string(got) != string(want) {
				return false
			}
		}
		return true
	}
	// Every change is sent: to the holders of the ring of three.
	poll.Until(t, 20*time.Second, func() bool { return replicated(three) },
		"replicas of %d keys reach their holders in the ring of three", len(keys))

	joined := c.add() // node-3: the keys stay on node-0, their replica moves here
	byName[joined.name] = joined
	c.waitSettled()
	poll.Until(t, 20*time.Second, func() bool { return replicated(four) },
		"replicas of %d keys reach %s, their new holder, without a change", len(keys), joined.name)
	if n := counterValue(owner.node.m.replicaMoved); n < float64(len(keys)) {
		t.Errorf("%s counted %v keys sent for a replica move, want at least %d", owner.name, n, len(keys))
	}

	c.crash(owner)
	c.signal()
	c.waitConverged()
	c.waitSettled()
	got := c.spend(joined, keys, r, 6)
	c.assertExact(fmt.Sprintf("after the owner crashed, on %s", joined.name), got, 4*len(keys), before)
}

// BenchmarkCollectMoved is the round after a fourth node joins three:
// node a walks a table of 1M keys and hands out those whose replica moved
// (up to maxReplicaKeys).
func BenchmarkCollectMoved(b *testing.B) {
	h := newFakeHost(b, "a", "a", "b", "c", "d")
	h.tbl[limit.TokenBucket] = bucket.NewTokenBucket(table.Config{MaxKeys: 1 << 20})
	clk := newClock()
	mv := newMover(Config{Name: "a", Now: clk.Now, ReplicationInterval: time.Second}, h, slog.New(slog.DiscardHandler), newMetrics(nil, nil, 0))
	now := clk.Now().UnixNano()
	r := rule(limit.TokenBucket, 10, time.Hour)
	var kb keyBuf
	for i := range 1 << 20 {
		h.tbl[limit.TokenBucket].Take(strings.Clone(kb.key("q", fmt.Sprint("account:", i))), now, r, 1)
	}
	parts := replicaMoves(viewOf(b, "a", "a", "b", "c"), viewOf(b, "a", "a", "b", "c", "d"), "a")
	b.ResetTimer()
	n := 0
	for b.Loop() {
		mv.moves.Add(parts)
		n = mv.collectMoved(now, func(ring.Member, limit.KeyState) {})
	}
	b.ReportMetric(float64(n), "keys/round")
	b.ReportMetric(float64(len(parts)), "partitions")
}

// TestReplicaAfterCrashReachesNextHolder: after a crash, the node that
// decides the dead owner's keys from the replica it held sends them to
// its own replica holder, unchanged; a second crash leaves their counts
// whole.
func TestReplicaAfterCrashReachesNextHolder(t *testing.T) {
	t.Parallel()
	clk := newClock()
	c := newTestCluster(t, 3, Config{Now: clk.Now, ReplicationInterval: 10 * time.Millisecond, Peer: exactPeer})
	nodes := c.running()
	first, second, last := nodes[1], nodes[0], nodes[2]
	three := viewOf(t, first.name, "node-0", "node-1", "node-2")
	var keys []string
	for _, k := range testKeys(1000) {
		if three.snap.Owner(k).Name == first.name && three.backup.Owner(k).Name == second.name {
			keys = append(keys, k)
		}
	}
	if len(keys) < 10 {
		t.Fatalf("%d keys on %s with their replica on %s: the test proves little", len(keys), first.name, second.name)
	}
	r := rule(limit.FixedWindow, 10, time.Hour)
	before := c.degraded()
	c.assertExact("before the crashes", c.spend(first, keys, r, 6), 6*len(keys), before)
	// same reports whether from and to hold the same state of every key.
	same := func(from, to *testNode) bool {
		now := clk.Now().UnixNano()
		for _, k := range keys {
			var kb keyBuf
			tk := kb.key("quota", k)
			want, _ := from.node.limiters[limit.FixedWindow].Export(tk, now)
			if got, _ := to.node.limiters[limit.FixedWindow].Export(tk, now); string(got) != string(want) {
				return false
			}
		}
		return true
	}
	poll.Until(t, 20*time.Second, func() bool { return same(first, second) }, "replicas of %d keys reach %s", len(keys), second.name)

	c.crash(first)
	c.signal()
	c.waitConverged()
	c.waitSettled()
	poll.Until(t, 20*time.Second, func() bool { return same(second, last) },
		"%s sends the %d keys it decides from its replica to %s, without a change", second.name, len(keys), last.name)

	c.crash(second)
	c.signal()
	c.waitConverged()
	c.waitSettled()
	c.assertExact(fmt.Sprintf("after two crashes, on %s", last.name), c.spend(last, keys, r, 6), 4*len(keys), before)
}
