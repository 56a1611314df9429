package peer

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/shardlimiter/shardlimiter/limit"
	"github.com/shardlimiter/shardlimiter/ring"
)

// rebuildSettled rebuilds n's ring for members and ends the transfers the
// rebuild planned, as if their state had arrived: a ring the test starts
// from, with no partition marked.
func rebuildSettled(t *testing.T, n *Node, members []ring.Member) {
	t.Helper()
	if err := n.rebuild(members); err != nil {
		t.Fatal(err)
	}
	n.mv.jobsMu.Lock()
	n.mv.jobs = nil
	n.mv.jobsMu.Unlock()
	parts := make([]int, n.view.Load().snap.Partitions())
	for p := range parts {
		parts[p] = p
	}
	n.ho.settle(parts)
}

// TestLeavingOwnerNamedBackFollowsItsPush: a key's owner, a, leaves; its
// ring drops it and marks the key's partition moved to the next owner, b,
// but its push of the partition has not landed yet, and b's ring still
// names a. A check sent to a meanwhile goes to b, which names a back. a
// waits for its push to land and sends the check to b again, which holds
// the state by then and decides it; a decides nothing of the partition
// from then on, and the checks of members whose rings still name a are
// named b. Before, a took the partition over (a pull from b, which had
// nothing) and marked it received: a, leaving, decided the checks of the
// members whose rings still named it, and b, marking the partition
// received on a's push, decided its own, both from the count a pushed
// (peer TestLeasesCreditedAfterTheOwnerLeaves: 1 to 319 hits over the
// capacity in about one run of five, with no fallback counted).
func TestLeavingOwnerNamedBackFollowsItsPush(t *testing.T) {
	t.Parallel()
	for _, alg := range []limit.Algorithm{limit.TokenBucket, limit.FixedWindow} {
		t.Run(alg.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) { leaveNamedBack(t, alg) })
		})
	}
}

// leavingCluster is three nodes a, b and c on a MemNet, not running (the
// test runs their transfers), with a key a owns and b would own without a.
func leavingCluster(t *testing.T) (nodes map[string]*Node, key string) {
	t.Helper()
	clk, net := newClock(), NewMemNet()
	all := []ring.Member{{Name: "a", Addr: "mem:a"}, {Name: "b", Addr: "mem:b"}, {Name: "c", Addr: "mem:c"}}
	nodes = map[string]*Node{}
	for _, m := range all {
		n, err := New(Config{Name: m.Name, GRPCAddr: m.Addr, Peers: net, Gossip: fixedGossip{members: all}, Now: clk.Now})
		if err != nil {
			t.Fatal(err)
		}
		net.Add(m.Addr, n)
		rebuildSettled(t, n, all)
		nodes[m.Name] = n
	}
	v := nodes["a"].view.Load()
	for i := 0; key == ""; i++ {
		if k := "account:" + string(rune('a'+i%26)) + string(rune('a'+i/26)); v.snap.Owner(k).Name == "a" && v.backup.Owner(k).Name == "b" {
			key = k
		}
	}
	return nodes, key
}

// runPushes runs the transfers n's rebuilds queued.
func runPushes(n *Node) {
	n.mv.jobsMu.Lock()
	jobs := n.mv.jobs
	n.mv.jobs = nil
	n.mv.jobsMu.Unlock()
	for _, j := range jobs {
		n.mv.runPush(context.Background(), j)
	}
}

func leaveNamedBack(t *testing.T, alg limit.Algorithm) {
	const lim = 10
	nodes, key := leavingCluster(t)
	a := nodes["a"]
	b := nodes["b"]
	ctx := context.Background()
	check := []limit.Check{{Name: "r", Key: key, Hits: 1, Rule: rule(alg, lim, time.Hour)}}
	admitted := 0
	count := func(what string, res []limit.Result, err error) {
		t.Helper()
		if err != nil || res[0].Error != "" && res[0].Reason != limit.NotOwner {
			t.Fatalf("%s: %+v, %v", what, res, err)
		}
		if res[0].Allowed {
			admitted++
		}
	}
	for range 3 {
		res, err := a.Check(ctx, check)
		count("a check on its owner", res, err)
	}

	left := make(chan error, 1)
	go func() { left <- a.Leave() }() // its push waits for the test
	synctest.Wait()
	answered := make(chan []limit.Result, 1)
	go func() {
		res, err := a.Check(ctx, check)
		count("a check on the leaving owner", res, err)
		answered <- res
	}()
	synctest.Wait() // b has named a back
	runPushes(a)
	if res := <-answered; res[0].Owner != "b" {
		t.Errorf("the check sent to a as it left was decided by %q, want b (the new owner, once the push landed)", res[0].Owner)
	}
	if err := <-left; err != nil {
		t.Fatalf("Leave: %v", err)
	}

	// c's ring still names a; so does b's, which sends its own checks to
	// a, and decides those a names it for.
	for range lim {
		res, err := a.CheckLocal(ctx, check)
		count("a check forwarded to a after its leave", res, err)
		res, err = b.CheckLocal(ctx, check)
		count("a check forwarded to b", res, err)
	}
	if admitted != lim {
		t.Errorf("admitted %d hits through a leave, want the limit, %d (two nodes deciding the key side by side)", admitted, lim)
	}
	for _, n := range nodes {
		if f := counterValue(n.m.fallback[n.cfg.FailPolicy]) + counterValue(n.m.handoffIncomplete); f != 0 {
			t.Errorf("%s counted %v fallback decisions and incomplete handoffs, want none", n.cfg.Name, f)
		}
	}
}

// TestLeavingOwnerNamesTheNewOwnerOnceThePushLanded: the second rebuild of
// a leave (gossip's news of it, the same ring) keeps the partitions whose
// push is under way marked moved, so a check forwarded to the leaving
// node meanwhile is named the new owner only once the push has landed;
// ended there, the new owner was named at once, before it held the state
// (its ring still naming the leaving node, it named it back, and the
// sender, bounced between the two, decided by its fail policy). And an
// answer naming the leaving node that comes after the push landed (b
// answered before) follows the leaving node's ring to where the partition
// went, not to the fail policy.
func TestLeavingOwnerNamesTheNewOwnerOnceThePushLanded(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		nodes, key := leavingCluster(t)
		a := nodes["a"]
		ctx := context.Background()
		check := []limit.Check{{Name: "r", Key: key, Hits: 1, Rule: rule(limit.FixedWindow, 10, time.Hour)}}
		left := make(chan error, 1)
		go func() { left <- a.Leave() }()
		synctest.Wait()
		if err := a.rebuild(a.cfg.Gossip.Members()); err != nil { // the news of its own leave
			t.Fatal(err)
		}
		p := a.view.Load().snap.PartitionOf(key)
		if k := a.ho.kind(p); k != partMoved {
			t.Errorf("a second rebuild while the push is under way left the partition %s, want moved", partKindNames[k])
		}
		answered := make(chan limit.Result, 1)
		go func() {
			res, err := a.CheckLocal(ctx, check)
			if err != nil {
				t.Errorf("CheckLocal: %v", err)
			}
			answered <- res[0]
		}()
		synctest.Wait()
		var r limit.Result
		select {
		case r = <-answered:
			t.Errorf("a check forwarded to the leaving node was answered %+v before its push landed", r)
		default:
		}
		runPushes(a)
		if r.Reason == limit.OK {
			r = <-answered
		}
		if r.Reason != limit.NotOwner || r.Owner != "b" {
			t.Errorf("once the push landed: %+v, want not owner, naming b", r)
		}
		if err := <-left; err != nil {
			t.Fatalf("Leave: %v", err)
		}

		res := make([]limit.Result, 1)
		a.redirect(ctx, nodes["b"].selfMember(), []routed{{ring.Member{Name: "a"}, 0}}, check, res, 1)
		if res[0].Owner != "b" || !res[0].Allowed {
			t.Errorf("b's late answer naming a: %+v, want decided by b", res[0])
		}
		if f := counterValue(a.m.fallback[a.cfg.FailPolicy]); f != 0 {
			t.Errorf("a counted %v fallback decisions, want none", f)
		}
	})
}
