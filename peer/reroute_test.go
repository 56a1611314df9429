package peer

import (
	"context"
	"testing"
	"time"

	"github.com/shardlimiter/shardlimiter/limit"
	"github.com/shardlimiter/shardlimiter/ring"
)

// leaveAfterThree has one of c's nodes (the entry) check, three times, a
// key another node owns, which then leaves gracefully (its keys handed
// over, its server stopped). It returns the entry, the node gone, the key
// and its check, whose limit is 10.
func leaveAfterThree(t *testing.T, c *testCluster) (entry *testNode, gone ring.Member, key string, check limit.Check) {
	t.Helper()
	nodes := c.running()
	entry, leaving := nodes[0], nodes[2]
	key = keyOwnedBy(t, entry, leaving.name)
	check = limit.Check{Name: "r", Key: key, Hits: 1, Rule: rule(limit.FixedWindow, 10, time.Hour)}
	for range 3 {
		if res := c.check(entry, check); res[0].Owner != leaving.name || !res[0].Allowed {
			t.Fatalf("before the leave: %+v, want admitted by %s", res[0], leaving.name)
		}
	}
	c.leave(leaving)
	return entry, ring.Member{Name: leaving.name, Addr: leaving.addr}, key, check
}

// TestForwardToAClosedClientIsRoutedAgain: a forward whose owner's client
// was closed under it (a rebuild dropped the owner, which left and handed
// its keys over) goes to the owner of the ring as it is now, which holds
// the handed-over count, not to the fail policy.
func TestForwardToAClosedClientIsRoutedAgain(t *testing.T) {
	t.Parallel()
	c := newTestCluster(t, 3, Config{})
	entry, gone, key, check := leaveAfterThree(t, c) // the entry's rebuild closes the client
	c.waitConverged()

	// The forward that was under way when the client closed.
	link, err := grpcDialer{}.Dial(entry.name, gone.Addr)
	if err != nil {
		t.Fatal(err)
	}
	link.Close()
	entry.node.peers.mu.Lock()
	entry.node.peers.clients[gone.Name] = &peerClient{addr: peerAddr(gone), link: link, down: newSuspension(time.Second)}
	entry.node.peers.mu.Unlock()
	res := make([]limit.Result, 1)
	entry.node.forward(context.Background(), gone, []limit.Check{check}, []int{0}, res, false, 0)

	want := entry.node.view.Load().snap.Owner(key).Name
	if res[0].Error != "" || res[0].Owner != want || res[0].Remaining != 6 {
		t.Errorf("forward on a closed client = %+v, want decided by %s, the new owner, with 6 left", res[0], want)
	}
}

// TestFailedForwardToADroppedOwnerIsRoutedAgain: a forward that failed
// because its owner had left (its port closed), handled once this node's
// ring has dropped the owner, goes to the owner of the ring as it is now,
// which holds the handed-over count. Before, it went to the stand-in, of
// which the ring without a member it no longer holds has none, and so to
// the fail policy: decided here from nothing (counted, but up to the
// whole limit again).
func TestFailedForwardToADroppedOwnerIsRoutedAgain(t *testing.T) {
	t.Parallel()
	c := newMemCluster(t, 3, Config{ReplicationInterval: time.Hour})
	entry, gone, key, check := leaveAfterThree(t, c)
	c.waitConverged()
	c.waitSettled()

	// The forward routed on the ring before the leave, failing at the
	// closed port.
	before := c.degraded()
	res := make([]limit.Result, 1)
	entry.node.forward(context.Background(), gone, []limit.Check{check}, []int{0}, res, false, 0)

	want := entry.node.view.Load().snap.Owner(key).Name
	if res[0].Error != "" || res[0].Owner != want || res[0].Remaining != 6 {
		t.Errorf("forward to an owner gone from the ring = %+v, want decided by %s, the new owner, with 6 left", res[0], want)
	}
	if d := c.degraded() - before; d != 0 {
		t.Errorf("%v fail-policy decisions, want none", d)
	}
}
