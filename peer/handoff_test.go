package peer

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/shardlimiter/shardlimiter/internal/poll"
	"github.com/shardlimiter/shardlimiter/limit"
	"github.com/shardlimiter/shardlimiter/transport/dial"
)

// spend sends hits of one check per key through tn and returns how many
// were admitted in all.
func (c *testCluster) spend(tn *testNode, keys []string, r limit.Rule, hits int) int {
	c.t.Helper()
	admitted := 0
	for range hits {
		var checks []limit.Check
		for _, k := range keys {
			checks = append(checks, limit.Check{Name: "quota", Key: k, Hits: 1, Rule: r})
		}
		for i, res := range c.check(tn, checks...) {
			if res.Error != "" {
				c.t.Fatalf("check of %s via %s: item error %q", keys[i], tn.name, res.Error)
			}
			if res.Allowed {
				admitted++
			}
		}
	}
	return admitted
}

// waitSettled waits until no running node has a partition marked for
// handoff.
func (c *testCluster) waitSettled() {
	c.t.Helper()
	poll.Until(c.t, 30*time.Second, func() bool {
		for _, tn := range c.running() {
			if !tn.node.mv.handoffIdle() {
				return false
			}
		}
		return true
	}, "handoffs settle")
}

// exactPeer is the peer config of the tests that assert exact counts: a
// forward timeout far above the default, so that a CPU-starved test machine
// (a load of 15 and more on 2 cores) rarely times a forward or a pull out.
var exactPeer = dial.PeerConfig{Timeout: 10 * time.Second}

// degraded sums, over every node the cluster ever ran, the decisions made
// by the fail policy and the handoffs given up on: the two documented ways
// (README, "When the cluster changes") in which a timeout ends the promise
// of exact counts.
func (c *testCluster) degraded() float64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	sum := 0.0
	for _, tn := range c.nodes {
		for _, f := range tn.node.m.fallback {
			sum += counterValue(f)
		}
		sum += counterValue(tn.node.m.handoffIncomplete)
	}
	return sum
}

// assertExact fails unless got == want, or a forward or pull timed out
// since the cluster counted before degraded decisions or handoffs: then
// the count is the fail policy's, and the deviation is only logged.
func (c *testCluster) assertExact(what string, got, want int, before float64) {
	c.t.Helper()
	if got == want {
		return
	}
	if d := c.degraded() - before; d > 0 {
		c.t.Logf("%s: %d admitted, not exactly %d: %v fail-policy decisions or incomplete handoffs (timeouts on a loaded machine)", what, got, want, d)
		return
	}
	c.t.Fatalf("%s: %d admitted, want exactly %d (no timeout, fallback or incomplete handoff was counted)", what, got, want)
}

func testKeys(n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprint("account:", i)
	}
	return keys
}

// handoffAlgorithms are the rules the membership tests run under: a key's
// count must survive every change for each of them.
var handoffAlgorithms = []limit.Rule{
	rule(limit.TokenBucket, 10, time.Hour),
	rule(limit.FixedWindow, 10, time.Hour),
	rule(limit.SlidingWindow, 10, time.Hour),
	rule(limit.SlidingLog, 10, time.Hour),
	{Algorithm: limit.LeakyBucket, Limit: 10, Period: time.Hour, Burst: 9},
	rule(limit.GubernatorTokenBucket, 10, time.Hour),
	rule(limit.GubernatorLeakyBucket, 10, time.Hour),
	{Algorithm: limit.Cell, Limit: 1, Period: time.Hour, Burst: 9}, // CL.THROTTLE k 9 1 3600
}

// TestCountsSurviveJoin: keys counted on two nodes keep their counts when a
// third joins and takes about a third of them: across the change, each key
// admits exactly its limit in all.
func TestCountsSurviveJoin(t *testing.T) {
	t.Parallel()
	for _, r := range handoffAlgorithms {
		t.Run(r.Algorithm.String(), func(t *testing.T) {
			t.Parallel()
			clk := newClock()
			c := newTestCluster(t, 2, Config{Now: clk.Now, Peer: exactPeer})
			before := c.degraded()
			keys := testKeys(60)
			first := c.running()[0]
			c.assertExact("before the join", c.spend(first, keys, r, 6), 6*len(keys), before)
			joined := c.add()
			c.waitSettled()
			moved := 0
			for _, k := range keys {
				if joined.node.view.Load().snap.Owner(k).Name == joined.name {
					moved++
				}
			}
			if moved == 0 {
				t.Fatal("the join moved no key: the test proves nothing")
			}
			// Through every node, including the one that joined.
			got := 0
			for _, tn := range c.running() {
				got += c.spend(tn, keys, r, 3)
			}
			c.assertExact(fmt.Sprintf("after the join (%d of %d keys moved)", moved, len(keys)), got, 4*len(keys), before)
		})
	}
}

// TestCountsSurviveLeave: a graceful leave hands every key to its new owner.
func TestCountsSurviveLeave(t *testing.T) {
	t.Parallel()
	for _, repl := range []time.Duration{0, 20 * time.Millisecond} {
		t.Run(fmt.Sprint("replication=", repl), func(t *testing.T) {
			t.Parallel()
			clk := newClock()
			c := newTestCluster(t, 3, Config{Now: clk.Now, ReplicationInterval: repl, Peer: exactPeer})
			before := c.degraded()
			r := rule(limit.FixedWindow, 10, time.Hour)
			keys := testKeys(60)
			nodes := c.running()
			c.assertExact("before the leave", c.spend(nodes[0], keys, r, 6), 6*len(keys), before)
			c.leave(nodes[1])
			c.signal()
			c.waitConverged()
			c.waitSettled()
			got := c.spend(nodes[0], keys, r, 3) + c.spend(nodes[2], keys, r, 3)
			c.assertExact("after the leave", got, 4*len(keys), before)
		})
	}
}

// TestTwoJoinsBackToBack: two nodes join one after the other without
// waiting for the first handoff to settle; counts still hold.
func TestTwoJoinsBackToBack(t *testing.T) {
	t.Parallel()
	clk := newClock()
	c := newTestCluster(t, 2, Config{Now: clk.Now, Peer: exactPeer})
	before := c.degraded()
	r := rule(limit.TokenBucket, 10, time.Hour)
	keys := testKeys(80)
	first := c.running()[0]
	c.spend(first, keys, r, 7)
	c.add()
	c.add()
	c.waitSettled()
	got := 0
	for _, tn := range c.running() {
		got += c.spend(tn, keys, r, 2)
	}
	c.assertExact("after two joins", got, 3*len(keys), before)
}

// TestCheckAtOldOwnerAfterMoveGoesOn: a node whose ring is stale forwards a
// moved key to its old owner; the old owner does not decide it on the
// state it handed over but names the new owner, and the check is decided
// there, on the moved state.
func TestCheckAtOldOwnerAfterMoveGoesOn(t *testing.T) {
	t.Parallel()
	clk := newClock()
	c := newTestCluster(t, 2, Config{Now: clk.Now})
	r := rule(limit.FixedWindow, 10, time.Hour)
	keys := testKeys(60)
	a, b := c.running()[0], c.running()[1]
	c.spend(a, keys, r, 6)

	// A third node joins; only it and a learn of it: b's ring is stale.
	c.mu.Lock()
	b.deaf = true
	c.mu.Unlock()
	joined := c.add()
	c.waitSettled()
	if b.node.view.Load().snap.Len() != 2 {
		t.Fatal("b heard of the join")
	}

	var moved []string
	for _, k := range keys {
		if joined.node.view.Load().snap.Owner(k).Name == joined.name && b.node.view.Load().snap.Owner(k).Name == a.name {
			moved = append(moved, k)
		}
	}
	if len(moved) == 0 {
		t.Fatal("no key moved from a to the new node: the test proves nothing")
	}
	// a, asked as owner by a stale peer, names the new owner.
	res, err := a.node.CheckLocal(context.Background(), []limit.Check{{Name: "quota", Key: moved[0], Hits: 1, Rule: r}})
	if err != nil || res[0].Reason != limit.NotOwner || res[0].Owner != joined.name {
		t.Fatalf("CheckLocal(%q) on the old owner = %+v, %v; want not_owner naming %s", moved[0], res, err, joined.name)
	}
	// Through b (stale ring: it forwards to a), each moved key admits what
	// it had left, decided by the new owner.
	got := c.spend(b, moved, r, 5)
	if want := 4 * len(moved); got != want {
		t.Fatalf("through the stale node: %d admitted for %d moved keys, want exactly %d", got, len(moved), want)
	}
	res = c.check(b, limit.Check{Name: "quota", Key: moved[0], Hits: 0, Rule: r})
	if res[0].Owner != joined.name {
		t.Fatalf("peek of %s via the stale node decided by %s, want %s", moved[0], res[0].Owner, joined.name)
	}
}

// TestStatesMergeInEitherOrder: a replica and a handoff of one key arriving
// in either order leave the state that consumed more.
func TestStatesMergeInEitherOrder(t *testing.T) {
	t.Parallel()
	r := rule(limit.FixedWindow, 10, time.Hour)
	clk := newClock()
	state := func(hits int) limit.KeyState {
		n, err := New(Config{Name: "src", Now: clk.Now})
		if err != nil {
			t.Fatal(err)
		}
		res, _ := n.Check(context.Background(), []limit.Check{{Name: "quota", Key: "k", Hits: int64(hits), Rule: r}})
		if !res[0].Allowed {
			t.Fatalf("spend %d: %+v", hits, res[0])
		}
		keys := n.mv.exportPartitions(allPartitions(n))
		if len(keys) != 1 {
			t.Fatalf("export: %d keys, want 1", len(keys))
		}
		return keys[0]
	}
	older, newer := state(2), state(6)
	for _, order := range [][2]limit.KeyState{{older, newer}, {newer, older}} {
		n, err := New(Config{Name: "dst", Now: clk.Now})
		if err != nil {
			t.Fatal(err)
		}
		if err := n.Push(context.Background(), "src", limit.Replica, nil, []limit.KeyState{order[0]}); err != nil {
			t.Fatal(err)
		}
		if err := n.Push(context.Background(), "src", limit.Join, nil, []limit.KeyState{order[1]}); err != nil {
			t.Fatal(err)
		}
		res, _ := n.Check(context.Background(), []limit.Check{{Name: "quota", Key: "k", Hits: 0, Rule: r}})
		if res[0].Remaining != 4 {
			t.Fatalf("after merging 2 and 6 hits: remaining %d, want 4", res[0].Remaining)
		}
	}
}

func allPartitions(n *Node) []int {
	ps := make([]int, n.view.Load().snap.Partitions())
	for i := range ps {
		ps[i] = i
	}
	return ps
}

// TestCrashedOwnerStandIn: with replication on, the keys of an owner that
// crashed are decided by the holder of their replicas, first as its
// stand-in (the ring still names the dead owner), then as their owner: the
// counts survive up to what was replicated.
func TestCrashedOwnerStandIn(t *testing.T) {
	t.Parallel()
	clk := newClock()
	c := newTestCluster(t, 3, Config{Now: clk.Now, ReplicationInterval: 10 * time.Millisecond})
	r := rule(limit.FixedWindow, 10, time.Hour)
	nodes := c.running()
	var keys []string
	for _, k := range testKeys(300) {
		if nodes[0].node.view.Load().snap.Owner(k).Name == nodes[1].name {
			keys = append(keys, k)
		}
	}
	if got := c.spend(nodes[0], keys, r, 6); got != 6*len(keys) {
		t.Fatalf("before the crash: %d admitted, want %d", got, 6*len(keys))
	}
	// Every key's last state has reached its replica holder. Rounds run
	// every 10 ms; the deadline is long because a send that times out
	// (250 ms) under a saturated CI machine suspends its destination with a
	// doubling back-off before the backlog goes again (CI once saw 5 s pass).
	w := nodes[0].node.view.Load().without(nodes[1].name)
	byName := map[string]*testNode{nodes[0].name: nodes[0], nodes[2].name: nodes[2]}
	now := clk.Now().UnixNano()
	poll.Until(t, 20*time.Second, func() bool {
		for _, k := range keys {
			var kb keyBuf
			tk := kb.key("quota", k)
			want, _ := nodes[1].node.limiters[limit.FixedWindow].Export(tk, now)
			got, _ := byName[w.Owner(k).Name].node.limiters[limit.FixedWindow].Export(tk, now)
			if string(got) != string(want) {
				return false
			}
		}
		return true
	}, "replicas of %d keys arrive", len(keys))

	c.crash(nodes[1]) // the others' rings still name it
	got := c.spend(nodes[0], keys, r, 2)
	if want := 2 * len(keys); got != want {
		t.Fatalf("with the owner dead, before the ring knows: %d admitted, want %d", got, want)
	}
	c.signal()
	c.waitConverged()
	c.waitSettled()
	got = c.spend(nodes[0], keys, r, 3) + c.spend(nodes[2], keys, r, 3)
	if want := 2 * len(keys); got != want {
		t.Fatalf("after the ring dropped the dead owner: %d admitted, want exactly %d", got, want)
	}
	if counterValue(nodes[0].node.m.standin)+counterValue(nodes[2].node.m.standin) == 0 {
		t.Fatal("no stand-in decision was counted")
	}
}

// counterValue reads a Prometheus counter.
func counterValue(c prometheus.Counter) float64 {
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		return 0
	}
	return m.GetCounter().GetValue()
}
