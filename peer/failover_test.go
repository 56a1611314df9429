package peer

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shardlimiter/shardlimiter/internal/poll"
	"github.com/shardlimiter/shardlimiter/limit"
	"github.com/shardlimiter/shardlimiter/transport/dial"
)

// keyOwnedBy finds a key that tn's ring places on owner.
func keyOwnedBy(t *testing.T, tn *testNode, owner string) string {
	t.Helper()
	snap := tn.node.view.Load().snap
	for i := range 10000 {
		k := fmt.Sprint("account:", i)
		if snap.Owner(k).Name == owner {
			return k
		}
	}
	t.Fatalf("no key owned by %s", owner)
	return ""
}

func TestForwardedCheckIsDecidedByItsOwner(t *testing.T) {
	t.Parallel()
	c := newTestCluster(t, 3, Config{Peer: exactPeer})
	nodes := c.running()
	key := keyOwnedBy(t, nodes[0], nodes[2].name)
	res := c.check(nodes[0], limit.Check{Name: "r", Key: key, Hits: 1, Rule: rule(limit.TokenBucket, 5, time.Minute)})
	if res[0].Owner != nodes[2].name || !res[0].Allowed || res[0].Remaining != 4 {
		t.Fatalf("Check(%q) via %s = %+v, want admitted by %s with 4 left", key, nodes[0].name, res[0], nodes[2].name)
	}
	// The owner's own table holds the key: a check entering there sees the hit.
	res = c.check(nodes[2], limit.Check{Name: "r", Key: key, Hits: 0, Rule: rule(limit.TokenBucket, 5, time.Minute)})
	if res[0].Remaining != 4 {
		t.Fatalf("peek on the owner: remaining %d, want 4", res[0].Remaining)
	}
}

func TestFailPolicies(t *testing.T) {
	t.Parallel()
	for _, p := range []FailPolicy{FailLocal, FailOpen, FailClosed} {
		t.Run(p.String(), func(t *testing.T) {
			t.Parallel()
			c := newTestCluster(t, 3, Config{FailPolicy: p, Peer: dial.PeerConfig{Timeout: 500 * time.Millisecond}})
			nodes := c.running()
			key := keyOwnedBy(t, nodes[0], nodes[1].name)
			// The owner dies; nobody has told the ring yet.
			c.crash(nodes[1])
			chk := limit.Check{Name: "r", Key: key, Hits: 1, Rule: rule(limit.FixedWindow, 1, time.Hour)}
			first := c.check(nodes[0], chk)[0]
			second := c.check(nodes[0], chk)[0]
			switch p {
			case FailLocal:
				if first.Error != "" || !first.Allowed || second.Allowed || first.Owner != nodes[0].name {
					t.Fatalf("local: %+v then %+v, want admitted then limited by %s", first, second, nodes[0].name)
				}
			case FailOpen:
				if first.Error != "" || !first.Allowed || !second.Allowed {
					t.Fatalf("open: %+v then %+v, want both admitted", first, second)
				}
			case FailClosed:
				if first.Reason != limit.Unavailable || !strings.Contains(first.Error, nodes[1].name) {
					t.Fatalf("closed: %+v, want an unavailable item error naming %s", first, nodes[1].name)
				}
			}
		})
	}
}

func TestLeaveReroutesKeys(t *testing.T) {
	t.Parallel()
	c := newTestCluster(t, 3, Config{Peer: exactPeer})
	nodes := c.running()
	key := keyOwnedBy(t, nodes[0], nodes[1].name)
	if err := nodes[1].node.Leave(); err != nil {
		t.Fatal(err)
	}
	if nodes[1].node.Ready() {
		t.Fatal("a leaving node reports ready")
	}
	// The leaving node forwards what it owned to the new owner.
	res := c.check(nodes[1], limit.Check{Name: "r", Key: key, Hits: 1, Rule: rule(limit.TokenBucket, 5, time.Minute)})
	if res[0].Error != "" || res[0].Owner == nodes[1].name {
		t.Fatalf("check on the leaving node = %+v, want forwarded to a remaining node", res[0])
	}
	c.leave(nodes[1])
	c.waitConverged()
	res = c.check(nodes[0], limit.Check{Name: "r", Key: key, Hits: 1, Rule: rule(limit.TokenBucket, 5, time.Minute)})
	if res[0].Error != "" || res[0].Owner == nodes[1].name || res[0].Remaining != 3 {
		t.Fatalf("after leave = %+v, want decided by the new owner with 3 left", res[0])
	}
}

// TestChurnUnderLoad joins, leaves and crashes nodes while clients keep
// sending batches: nothing panics, every check is answered without an item
// error (the default local policy), and afterwards every key routes to its
// new owner.
func TestChurnUnderLoad(t *testing.T) {
	t.Parallel()
	c := newTestCluster(t, 3, Config{Peer: dial.PeerConfig{Timeout: 300 * time.Millisecond}})
	var stop atomic.Bool
	var answered, itemErrors atomic.Int64
	var wg sync.WaitGroup
	entry := c.running()[0] // never leaves
	for w := range 4 {
		wg.Go(func() {
			for i := 0; !stop.Load(); i++ {
				var batch []limit.Check
				for k := range 20 {
					batch = append(batch, limit.Check{Name: "churn", Key: fmt.Sprint("k", w, "-", (i+k)%200), Hits: 1, Rule: rule(limit.TokenBucket, 1_000_000, time.Second)})
				}
				res, err := entry.node.Check(context.Background(), batch)
				if err != nil || len(res) != len(batch) {
					t.Errorf("Check = %d results, %v", len(res), err)
					return
				}
				for _, r := range res {
					if r.Error != "" {
						itemErrors.Add(1)
					}
				}
				answered.Add(int64(len(res)))
			}
		})
	}
	progress := func() {
		n := answered.Load()
		poll.Until(t, 10*time.Second, func() bool { return answered.Load() > n+200 }, "checks keep flowing")
	}
	progress()
	a := c.add()
	progress()
	b := c.add()
	progress()
	c.leave(a)
	c.signal()
	progress()
	c.crash(b)
	c.signal()
	progress()
	c.add()
	progress()
	stop.Store(true)
	wg.Wait()
	if n := itemErrors.Load(); n != 0 {
		t.Errorf("%d item errors under the local policy", n)
	}
	c.waitConverged()
	// A forward that timed out under the churn (300 ms on a loaded
	// machine) suspends its owner for up to 20 back-offs, during which
	// the entry decides by the fail policy: poll past that.
	for _, tn := range c.running() {
		snap := tn.node.view.Load().snap
		for i := range 50 {
			key := fmt.Sprint("k0-", i)
			want := snap.Owner(key).Name
			poll.Until(t, 10*time.Second, func() bool {
				res := c.check(tn, limit.Check{Name: "churn", Key: key, Rule: rule(limit.TokenBucket, 1_000_000, time.Second)})
				return res[0].Owner == want
			}, "after churn %q via %s: never decided by its owner %s", key, tn.name, want)
		}
	}
}
