package peer

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shardlimiter/shardlimiter/internal/poll"
	"github.com/shardlimiter/shardlimiter/limit"
)

// leaseLoad runs callers on a node until stop is closed: single checks of
// one hit of key under r, counting what is admitted.
type leaseLoad struct {
	admitted atomic.Int64
	sent     atomic.Int64
	wg       sync.WaitGroup
}

// runLeasedKey checks key under r from every node of c, two callers each,
// until past hits were sent, and returns the load once it has stopped.
// The lessees' callers start first, until a lease is granted: the owner's
// own callers, deciding without a forward, could otherwise spend the key
// down past what the owner grants from before the first lessee's rate
// window closed (no grant: the test would prove nothing).
func runLeasedKey(t *testing.T, c *testCluster, r limit.Rule, key string, past int64) *leaseLoad {
	t.Helper()
	load := &leaseLoad{}
	stop := make(chan struct{})
	owner := c.running()[0].node.view.Load().snap.Owner(key).Name
	var ownerNode *testNode
	for _, tn := range c.running() {
		if tn.name == owner {
			ownerNode = tn
			continue
		}
		load.run(t, tn, r, key, 2, stop)
	}
	poll.Until(t, 30*time.Second, func() bool { return c.leaseGrants() > 0 }, "a lease granted to a node forwarding the key")
	load.run(t, ownerNode, r, key, 2, stop)
	poll.Until(t, 30*time.Second, func() bool { return load.sent.Load() >= past }, "the load runs past %d hits", past)
	close(stop)
	load.wg.Wait()
	return load
}

func (l *leaseLoad) run(t *testing.T, tn *testNode, r limit.Rule, key string, callers int, stop <-chan struct{}) {
	for range callers {
		l.wg.Go(func() {
			c := []limit.Check{{Name: "quota", Key: key, Hits: 1, Rule: r}}
			for {
				select {
				case <-stop:
					return
				default:
				}
				res, err := tn.node.Check(context.Background(), c)
				if err != nil {
					t.Errorf("Check on %s: %v", tn.name, err)
					return
				}
				if res[0].Error != "" {
					t.Errorf("check on %s: item error %q", tn.name, res[0].Error)
					return
				}
				l.sent.Add(1)
				if res[0].Allowed {
					l.admitted.Add(1)
				}
			}
		})
	}
}

// leaseDecisions sums the checks decided from leases on every node the
// cluster ran.
func (c *testCluster) leaseDecisions() float64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	sum := 0.0
	for _, tn := range c.nodes {
		sum += counterValue(tn.node.m.leaseDecisions)
	}
	return sum
}

// leaseGrants sums the grants made on every node the cluster ran.
func (c *testCluster) leaseGrants() float64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	sum := 0.0
	for _, tn := range c.nodes {
		sum += counterValue(tn.node.m.leaseGranted)
	}
	return sum
}

// leasesHeld sums the hits held in leases, as lessees and as owners, on
// the running nodes.
func (c *testCluster) leasesHeld() int64 {
	var sum int64
	for _, tn := range c.running() {
		sum += tn.node.mv.leases.heldHits(tn.node.cfg.Now().UnixNano())
		if tn.node.lh != nil {
			sum += tn.node.lh.held.Load()
		}
	}
	return sum
}

// One hot key, callers on every node, leases on: the nodes decide most
// checks from leases, and everything admitted together is exactly the
// key's capacity (its refill, ten hits an hour, adds nothing during
// the test): not one hit over. Once the leases have ended and their leftovers
// are credited back, the owner admits what is left, and the total is the
// capacity exactly.
func TestLeasesExactOnMemNet(t *testing.T) {
	const capacity = 200_000
	r := limit.Rule{Algorithm: limit.TokenBucket, Limit: 10, Period: time.Hour, Burst: capacity}
	c := newMemCluster(t, 3, Config{Leases: true, LeaseThreshold: 1, ReplicationInterval: 100 * time.Millisecond, Peer: exactPeer})
	before := c.degraded()
	load := runLeasedKey(t, c, r, "k", 3*capacity/2)
	got := load.admitted.Load()
	if got > capacity {
		t.Fatalf("admitted %d of a capacity of %d: %d over", got, capacity, got-capacity)
	}
	if d, g := c.leaseDecisions(), c.leaseGrants(); d == 0 || g == 0 {
		t.Fatalf("%.0f grants, %.0f checks decided from leases: the test proves nothing (sent %d)", g, d, load.sent.Load())
	}
	poll.Until(t, 10*time.Second, func() bool { return c.leasesHeld() == 0 }, "every lease ends")
	rest := c.spend(c.running()[0], []string{"k"}, r, capacity)
	c.assertExact("admitted, then the rest after the leases ended", int(got)+rest, capacity, before)
	t.Logf("admitted %d under load (%.0f grants, %.0f checks decided from leases), %d after", got, c.leaseGrants(), c.leaseDecisions(), rest)
}

// The same through churn with leases outstanding: a node joins, the key's
// owner leaves gracefully (its keys, debits included, go to the new
// owner), and a lessee crashes holding a lease (its hits stay spent:
// under-admission of at most its lease). Each change waits for a lease
// to be out. Nothing is admitted over the capacity.
func TestLeasesExactThroughChurnOnMemNet(t *testing.T) {
	const capacity = 4_000_000
	leaseChurnOnMemNet(t, limit.Rule{Algorithm: limit.TokenBucket, Limit: 100, Period: time.Hour, Burst: capacity}, capacity)
}

// The same for the windows: a grant takes from the key's window, and
// its credit back gives to it.
func TestLeasesExactForWindowsThroughChurnOnMemNet(t *testing.T) {
	const capacity = 4_000_000
	for _, alg := range []limit.Algorithm{limit.FixedWindow, limit.SlidingWindow} {
		t.Run(alg.String(), func(t *testing.T) {
			leaseChurnOnMemNet(t, limit.Rule{Algorithm: alg, Limit: capacity, Period: time.Hour}, capacity)
		})
	}
}

// leaseChurnOnMemNet is TestLeasesExactThroughChurnOnMemNet for the key
// under r, which admits capacity in the test's time.
func leaseChurnOnMemNet(t *testing.T, r limit.Rule, capacity int64) {
	c := newMemCluster(t, 3, Config{Leases: true, LeaseThreshold: 1, ReplicationInterval: 100 * time.Millisecond, Peer: exactPeer})
	before := c.degraded()
	var load leaseLoad
	stops := map[*testNode]chan struct{}{}
	start := func(tn *testNode) {
		stops[tn] = make(chan struct{})
		load.run(t, tn, r, "k", 2, stops[tn])
	}
	for _, tn := range c.running() {
		start(tn)
	}
	holder := func() *testNode {
		owner := c.running()[0].node.view.Load().snap.Owner("k").Name
		for _, tn := range c.running() {
			if tn.name != owner && tn.node.lh.held.Load() > 0 {
				return tn
			}
		}
		return nil
	}
	outstanding := func(what string) {
		// Below a quarter of the capacity nothing is granted: a machine
		// that runs the load fast enough spends the key before the last
		// change (seen: 44.6 million checks sent, the capacity admitted,
		// deny leases only), and the run can prove nothing more.
		poll.Until(t, 30*time.Second, func() bool { return holder() != nil || load.admitted.Load() >= capacity*3/4 },
			"a lease outstanding before %s", what)
		if holder() == nil {
			t.Skipf("the key was spent down to a quarter before %s (%d admitted): no lease is granted any more", what, load.admitted.Load())
		}
	}
	outstanding("the join")
	start(c.add())
	outstanding("the owner leaves")
	ownerName := c.running()[0].node.view.Load().snap.Owner("k").Name
	for _, tn := range c.running() {
		if tn.name == ownerName {
			close(stops[tn])
			c.leave(tn)
		}
	}
	c.signal()
	c.waitConverged()
	outstanding("a lessee crashes")
	lessee := holder()
	close(stops[lessee])
	lost := lessee.node.lh.held.Load()
	c.crash(lessee)
	c.signal()
	c.waitConverged()
	// Spending millions of hits takes 20-90 s under -race, longer on a
	// loaded machine: the deadline only bounds a run that never spends.
	poll.Until(t, 4*time.Minute, func() bool { return load.sent.Load()-load.admitted.Load() >= capacity/10 }, "the key is spent")
	for tn, stop := range stops {
		if !tn.down {
			close(stop)
		}
	}
	load.wg.Wait()
	got := load.admitted.Load()
	if got > capacity {
		if d := c.degraded() - before; d == 0 {
			t.Fatalf("admitted %d of a capacity of %d: %d over, with no timeout, fallback or incomplete handoff", got, capacity, got-capacity)
		}
		t.Logf("admitted %d of %d: over after %v degraded decisions (timeouts on a loaded machine)", got, capacity, c.degraded()-before)
	}
	t.Logf("admitted %d of %d, %d under (%.0f grants, %.0f checks from leases; the crashed lessee held %d)",
		got, capacity, capacity-got, c.leaseGrants(), c.leaseDecisions(), lost)
}

// A key over its limit is leased as "nothing until T" (one hit's wait, at
// most a TTL): the lessee refuses it locally (answering as itself,
// without a forward) until T, forwards it again from T, and the owner
// admits it once a hit has come back.
func TestDenyLeaseRefusesLocallyUntilReset(t *testing.T) {
	clk := newClock()
	c := newMemCluster(t, 2, Config{Now: clk.Now, Leases: true, LeaseThreshold: 1, Peer: exactPeer})
	r := limit.Rule{Algorithm: limit.TokenBucket, Limit: 10, Period: 10 * time.Second} // one hit a second
	owner, lessee := c.running()[0], c.running()[1]
	key := keyOwnedBy(t, owner, owner.name)
	check := func(tn *testNode) limit.Result {
		t.Helper()
		return c.check(tn, limit.Check{Name: "quota", Key: key, Hits: 1, Rule: r})[0]
	}
	if got := c.spend(owner, []string{key}, r, 10); got != 10 {
		t.Fatalf("the owner admitted %d of 10", got)
	}
	if res := check(lessee); res.Allowed || res.Owner != owner.name {
		t.Fatalf("first check via the lessee: %+v, want refused by the owner", res)
	}
	clk.Advance(100 * time.Millisecond) // a rate window: the lessee asks
	check(lessee)
	var kb keyBuf
	tk := kb.key("quota", key)
	poll.Until(t, 10*time.Second, func() bool {
		lessee.node.lh.mu.RLock()
		e := lessee.node.lh.keys[tk]
		lessee.node.lh.mu.RUnlock()
		return e != nil && e.deny.Load() > clk.Now().UnixNano()
	}, "the lessee holds a deny lease")
	clk.Advance(400 * time.Millisecond) // 500 ms after the key was spent
	res := check(lessee)
	if res.Allowed || res.Owner != lessee.name || res.RetryAfter != 100*time.Millisecond {
		t.Fatalf("check under the deny lease: %+v, want refused here for 100 ms more (the lease's TTL)", res)
	}
	if d := counterValue(lessee.node.m.leaseDecisions); d < 1 {
		t.Fatalf("decisions from leases: %v, want at least 1", d)
	}
	clk.Advance(100 * time.Millisecond) // T: forwarded again; the key still has nothing
	if res := check(lessee); res.Allowed || res.Owner != owner.name {
		t.Fatalf("check at the deny lease's end: %+v, want refused by the owner", res)
	}
	clk.Advance(400 * time.Millisecond) // one hit has come back
	poll.Until(t, 10*time.Second, func() bool {
		res := check(lessee)
		if res.Owner == lessee.name { // a deny lease asked at 600 ms ends at 1 s exactly
			t.Fatalf("refused here after the hit came back: %+v", res)
		}
		return res.Allowed
	}, "the owner admits the hit that came back")
}

// An owner that crashes right after a grant, before any replication round,
// leaves the grant's debit with the key's replica holder, which becomes
// the key's owner: the lease and the new owner together admit the
// capacity, not one hit more.
func TestLeaseDebitSurvivesTheOwnersCrash(t *testing.T) {
	const capacity = 100
	r := limit.Rule{Algorithm: limit.TokenBucket, Limit: 1, Period: time.Hour, Burst: capacity}
	c := newMemCluster(t, 3, Config{Leases: true, ReplicationInterval: time.Hour, Peer: exactPeer})
	owner := c.running()[0]
	key := keyOwnedBy(t, owner, owner.name)
	var lessee *testNode
	for _, tn := range c.running() {
		if tn != owner {
			lessee = tn
		}
	}
	var kb keyBuf
	g, err := owner.node.Lease(context.Background(), limit.LeaseRequest{From: lessee.name, Key: kb.key("quota", key), Rule: r, Want: 30})
	if err != nil || g.Hits != 30 {
		t.Fatalf("grant: %+v, %v; want 30 hits", g, err)
	}
	before := c.degraded()
	c.crash(owner)
	c.signal()
	c.waitConverged()
	c.waitSettled()
	got := c.spend(lessee, []string{key}, r, capacity)
	c.assertExact("admitted by the new owner after a grant of 30 of 100", got, capacity-30, before)
}

// A lessee decides from its lease only checks under the rule it was
// granted for: a check under another rule is forwarded to the owner.
func TestLeaseOnlyForItsRule(t *testing.T) {
	clk := newClock()
	c := newMemCluster(t, 2, Config{Now: clk.Now, Leases: true, LeaseThreshold: 1, Peer: exactPeer})
	r := limit.Rule{Algorithm: limit.TokenBucket, Limit: 100, Period: time.Hour}
	owner, lessee := c.running()[0], c.running()[1]
	key := keyOwnedBy(t, owner, owner.name)
	check := func(r limit.Rule) limit.Result {
		return c.check(lessee, limit.Check{Name: "quota", Key: key, Hits: 1, Rule: r})[0]
	}
	check(r)
	clk.Advance(100 * time.Millisecond)
	check(r)
	poll.Until(t, 10*time.Second, func() bool { return lessee.node.lh.held.Load() > 0 }, "the lessee holds a lease")
	if res := check(r); !res.Allowed || res.Owner != lessee.name {
		t.Fatalf("check under the lease's rule: %+v, want admitted here", res)
	}
	other := r
	other.Limit = 50
	if res := check(other); res.Owner != owner.name {
		t.Fatalf("check under another rule: %+v, want decided by the owner", res)
	}
}

// The same for the windows: a grant takes its hits from the current
// window and lives at most until the window ends; a leftover is credited
// back into that window only. Callers on every node at the key's limit
// admit the window's limit and not one hit more, leases included. The window is a
// day; a run that straddles a day's end (UTC) is skipped. The limit is
// large enough that the lessees' forwarded checks do not spend it before
// their first grant (with 50,000, on a busy machine, they did: deny
// leases only, the test proved nothing).
func TestLeasesExactForWindowsOnMemNet(t *testing.T) {
	for _, alg := range []limit.Algorithm{limit.FixedWindow, limit.SlidingWindow} {
		t.Run(alg.String(), func(t *testing.T) {
			const limit_ = 200_000
			r := limit.Rule{Algorithm: alg, Limit: limit_, Period: 24 * time.Hour}
			start := time.Now()
			c := newMemCluster(t, 3, Config{Leases: true, LeaseThreshold: 1, ReplicationInterval: 100 * time.Millisecond, Peer: exactPeer})
			before := c.degraded()
			load := runLeasedKey(t, c, r, "k", 3*limit_/2)
			got := load.admitted.Load()
			if d, g := c.leaseDecisions(), c.leaseGrants(); d == 0 || g == 0 {
				t.Fatalf("%.0f grants, %.0f checks decided from leases: the test proves nothing (sent %d)", g, d, load.sent.Load())
			}
			poll.Until(t, 10*time.Second, func() bool { return c.leasesHeld() == 0 }, "every lease ends")
			rest := c.spend(c.running()[0], []string{"k"}, r, limit_)
			if day := int64(24 * time.Hour); start.UnixNano()/day != time.Now().UnixNano()/day {
				t.Skip("the run straddled the end of a window (a day, UTC)")
			}
			if got > limit_ {
				t.Fatalf("admitted %d of a limit of %d: %d over", got, limit_, got-limit_)
			}
			// Exactly the limit, but for a release lost on a loaded machine
			// (its hits stay spent: under-admission of at most a lease; seen
			// once in about twenty runs, 7,215 of 200,000).
			if total := int(got) + rest; total > limit_ {
				c.assertExact("admitted, then the rest after the leases ended", total, limit_, before)
			} else if total < limit_-limit_/20 {
				t.Fatalf("admitted %d under load and %d after: %d under the limit of %d, more than the leases could hold", got, rest, limit_-total, limit_)
			}
			t.Logf("admitted %d under load (%.0f grants, %.0f checks decided from leases), %d after: %d under", got, c.leaseGrants(), c.leaseDecisions(), rest, limit_-int(got)-rest)
		})
	}
}
