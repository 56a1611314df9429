package peer

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/shardlimiter/shardlimiter/limit"
	"github.com/shardlimiter/shardlimiter/peer/leasing"
	"github.com/shardlimiter/shardlimiter/ring"
)

// Leases, the lessee's side: a key this node forwards often is decided
// here from a lease of its owner's capacity (lease.go has the owner's
// side, docs/ARCHITECTURE.md "Leases" the design).
//
// The check path (Node.Check) only reads and spends: a lease's hits are
// one atomic counter per key, taken by CAS; a check that finds too few is
// forwarded as before. Asking for a lease, renewing it and giving back
// what is left are done off the check path, in a goroutine per call (at
// most one per key at a time), started when the key's forwarded rate
// passes Config.LeaseThreshold and its lease runs low. A lease ends at its
// expiry, by a timer that gives back what is left; a leaving node gives
// back all of its leases first (Node.Leave).

const (
	// leaseWindow is the span over which a key's rate of checks is
	// measured.
	leaseWindow = 100 * time.Millisecond
	// leaseSpan is how much of its demand a lessee asks for: its rate
	// times this. It renews at half of its last grant, about every half
	// of this while the demand lasts.
	leaseSpan = 200 * time.Millisecond
	// leaseMargin is how much earlier than the owner a lessee ends a
	// lease: it starts the TTL at its request, before the owner's, and
	// stops a little earlier still, so that its release finds the record.
	leaseMargin = leaseTTL / 5
	// leaseCallTimeout bounds one lease call.
	leaseCallTimeout = time.Second
	// leaseBackoff is how long a lessee waits to ask again for a key that
	// was granted nothing (near its limit, or the call failed).
	leaseBackoff = 100 * time.Millisecond
	// maxHeldKeys bounds the keys a node tracks for leases.
	maxHeldKeys = 4096
	// heldIdle is how long a tracked key without a lease is kept.
	heldIdle = 5 * time.Second
	// releaseHops bounds the calls of one release that follow NotOwner
	// answers, and releaseBounce is the pause before asking a node again.
	releaseHops   = 4
	releaseBounce = 50 * time.Millisecond
)

// leaseHolder is the leases this node holds, and the demand of the keys it
// forwards. All methods are safe for concurrent use.
type leaseHolder struct {
	n         *Node
	threshold int64 // checks per second

	demand *demand // which forwarded keys may be hot (leasedemand.go)

	mu   sync.RWMutex
	keys map[string]*heldKey // by table key; guarded by mu
	// size is len(keys) and lastPrune the last time a full map was
	// pruned (Unix ns); written with mu held for writing, read without
	// it, so that a check finding the map full takes no write lock.
	size      atomic.Int64
	lastPrune atomic.Int64

	held atomic.Int64   // hits held in leases, all keys
	wg   sync.WaitGroup // the lease calls in flight (ask)
	// callsMu orders starting a call (wg.Add) against wait: once
	// stopped, no call starts (a check in flight as the node's run ends
	// may still pass the threshold; an Add beside Wait is a race).
	callsMu sync.Mutex
	stopped bool // guarded by callsMu
}

// heldKey is one key's lease and demand on the lessee.
type heldKey struct {
	key  string      // the table key
	rule limit.Rule  // the rule its leases are for
	slot *demandSlot // the key's slot of the demand sketch

	tokens atomic.Int64              // hits left in the lease
	grant  atomic.Pointer[heldGrant] // the last grant; nil when none
	deny   atomic.Int64              // refuse the key until this instant (Unix ns)
	busy   atomic.Bool               // a lease call is in flight
	ask    atomic.Int64              // do not ask before this instant
	win    atomic.Int64              // start of the rate window (Unix ns)
	count  atomic.Int64              // checks in the rate window
	rate   atomic.Int64              // checks per second, last window
	used   atomic.Int64              // last check (Unix ns)
}

// heldGrant is one grant as the lessee holds it.
type heldGrant struct {
	owner   string
	id      uint64
	hits    int64
	expires int64 // Unix ns, by this node's clock
}

func newLeaseHolder(n *Node, threshold float64) *leaseHolder {
	t := max(int64(threshold), 1)
	return &leaseHolder{n: n, threshold: t, demand: newDemand(t), keys: map[string]*heldKey{}}
}

// leasableCheck reports whether c may be decided from a lease.
func leasableCheck(c *limit.Check) bool {
	return !c.Chained && c.Hits > 0 && leasing.Leasable(c.Rule)
}

// decide answers c, a check of key (a table key, valid only during the
// call) owned by owner, from this node's lease when it has one with hits
// enough, or its deny lease. It reports false when the check is to be
// forwarded. It never blocks: a lease call it needs runs in a goroutine.
func (lh *leaseHolder) decide(key string, c *limit.Check, owner ring.Member, now int64, res *limit.Result) bool {
	e := lh.entry(key, c.Rule, now)
	if e == nil {
		return false
	}
	if e.rule != c.Rule {
		lh.ruleChanged(e)
		return false
	}
	e.observe(now)
	if until := e.deny.Load(); now < until {
		*res = limit.Result{Owner: lh.n.cfg.Name, Decision: limit.Decision{
			ResetAt: leasing.DenyResetAt(c.Rule, until), RetryAfter: time.Duration(until - now)}}
		lh.n.m.leaseDecisions.Inc()
		return true
	}
	if g := e.grant.Load(); g != nil && now < g.expires {
		for {
			t := e.tokens.Load()
			if t < c.Hits {
				break
			}
			if e.tokens.CompareAndSwap(t, t-c.Hits) {
				lh.held.Add(-c.Hits)
				left := t - c.Hits
				*res = limit.Result{Owner: lh.n.cfg.Name, Decision: limit.Decision{Allowed: true, Remaining: left,
					ResetAt: leasing.ResetAt(c.Rule, now, left)}}
				lh.n.m.leaseDecisions.Inc()
				if left*2 < g.hits || g.expires-now < int64(leaseTTL)/2 {
					lh.renew(e, owner, now)
				}
				return true
			}
		}
	}
	lh.renew(e, owner, now)
	return false
}

// ruleChanged forgets e, whose key is now checked under another rule,
// once it holds no lease: the key's next check tracks it under its rule.
func (lh *leaseHolder) ruleChanged(e *heldKey) {
	if e.grant.Load() != nil || e.busy.Load() {
		return
	}
	lh.mu.Lock()
	if lh.keys[e.key] == e {
		lh.forgetLocked(e)
	}
	lh.mu.Unlock()
}

// forgetLocked takes e out of the map; mu is held for writing.
func (lh *leaseHolder) forgetLocked(e *heldKey) {
	delete(lh.keys, e.key)
	e.slot.untrack()
	lh.size.Add(-1)
}

// observe counts a check in the key's rate window.
func (e *heldKey) observe(now int64) {
	e.used.Store(now)
	e.count.Add(1)
	if w := e.win.Load(); now-w >= int64(leaseWindow) && e.win.CompareAndSwap(w, now) {
		c := e.count.Swap(0)
		if w == 0 {
			return
		}
		e.rate.Store(c * int64(time.Second) / (now - w))
	}
}

// entry returns the tracked key, adding it when its demand may pass the
// threshold (leasedemand.go) and there is room; nil for a key not tracked.
// A key not tracked whose slot tracks none costs one atomic add; the map
// is read under mu for reading, and written only to add a key.
func (lh *leaseHolder) entry(key string, r limit.Rule, now int64) *heldKey {
	s := lh.demand.slot(key)
	hot, tracked := lh.demand.add(s, now)
	if !hot && !tracked {
		return nil
	}
	lh.mu.RLock()
	e := lh.keys[key]
	lh.mu.RUnlock()
	if e != nil || !hot {
		return e
	}
	if lh.size.Load() >= maxHeldKeys && now-lh.lastPrune.Load() < int64(heldIdle) {
		return nil
	}
	lh.mu.Lock()
	defer lh.mu.Unlock()
	if e = lh.keys[key]; e != nil {
		return e
	}
	if len(lh.keys) >= maxHeldKeys {
		if now-lh.lastPrune.Load() < int64(heldIdle) {
			return nil
		}
		lh.lastPrune.Store(now)
		for _, e := range lh.keys {
			if e.grant.Load() == nil && !e.busy.Load() && now-e.used.Load() > int64(heldIdle) {
				lh.forgetLocked(e)
			}
		}
		if len(lh.keys) >= maxHeldKeys {
			return nil
		}
	}
	e = &heldKey{key: string([]byte(key)), rule: r, slot: s}
	lh.keys[e.key] = e
	s.track()
	lh.size.Add(1)
	return e
}

// renew starts a lease call for e when its demand passes the threshold
// and none is in flight or backing off.
func (lh *leaseHolder) renew(e *heldKey, owner ring.Member, now int64) {
	if e.rate.Load() < lh.threshold || now < e.ask.Load() || lh.n.leaving.Load() || !e.busy.CompareAndSwap(false, true) {
		return
	}
	lh.callsMu.Lock()
	if lh.stopped {
		lh.callsMu.Unlock()
		e.busy.Store(false)
		return
	}
	lh.wg.Add(1)
	lh.callsMu.Unlock()
	go func() {
		defer lh.wg.Done()
		defer e.busy.Store(false)
		lh.ask(e, owner)
	}()
}

// ask asks owner for a grant for e and installs what it gets.
func (lh *leaseHolder) ask(e *heldKey, owner ring.Member) {
	start := lh.n.cfg.Now().UnixNano()
	want := min(max(e.rate.Load()*int64(leaseSpan)/int64(time.Second), 1), e.rule.Capacity())
	g, err := lh.call(owner, limit.LeaseRequest{Key: e.key, Rule: e.rule, Want: want})
	switch {
	case err != nil || g.NotOwner != "":
		e.ask.Store(start + int64(leaseBackoff))
		return
	case g.Deny > 0:
		e.deny.Store(start + int64(g.Deny))
		return
	case g.Hits == 0:
		e.ask.Store(start + int64(leaseBackoff))
		return
	}
	ng := &heldGrant{owner: owner.Name, id: g.ID, hits: g.Hits, expires: start + int64(g.TTL) - int64(leaseMargin)}
	old := e.grant.Swap(ng)
	if old != nil && old.expires > start {
		lh.n.m.leaseRenewed.Inc()
	}
	if old != nil && !leasing.SameWindow(e.rule, old.expires, ng.expires) {
		// A window's hits are not pooled with the next window's: what is
		// left of the last grant is out of use (its owner would not credit
		// it back: its window has ended).
		lh.held.Add(-e.tokens.Swap(0))
	}
	e.tokens.Add(g.Hits)
	lh.held.Add(g.Hits)
	time.AfterFunc(g.TTL-leaseMargin, func() { lh.expire(e, ng) })
}

// expire ends g, e's grant, unless a later grant replaced it, and gives
// back what is left of the lease.
func (lh *leaseHolder) expire(e *heldKey, g *heldGrant) {
	if !e.grant.CompareAndSwap(g, nil) {
		return
	}
	lh.n.m.leaseExpired.Inc()
	lh.giveBack(e, g)
}

// giveBack takes what is left of e's lease out of use and releases it to
// the owner of g, e's last grant.
func (lh *leaseHolder) giveBack(e *heldKey, g *heldGrant) {
	left := e.tokens.Swap(0)
	lh.held.Add(-left)
	if left == 0 {
		return
	}
	// The grant's owner, while it is a member, else the key's owner now:
	// the book's records travel with the key's state.
	m := lh.n.member(g.owner)
	if peerAddr(m) == "" {
		m = lh.n.view.Load().snap.Owner(uniqueKeyOf(e.key))
	}
	req := limit.LeaseRequest{Key: e.key, Rule: e.rule, Release: g.id, Leftover: left}
	// A node that no longer decides the key names the one it takes for
	// its owner, and the release goes there. Two nodes may each name the
	// other for a moment (the old owner has handed the key over, the new
	// one's ring does not give it the key yet): the release then asks
	// again after releaseBounce, at most releaseHops calls in all. Only an
	// answer that credited nothing (NotOwner) is followed; a release that
	// fails leaves the hits spent: under-admission.
	asked := map[string]bool{}
	for range releaseHops {
		var a limit.LeaseGrant
		var err error
		switch {
		case m.Name == lh.n.cfg.Name: // the key moved here
			req.From = m.Name
			ctx, cancel := context.WithTimeout(context.Background(), leaseCallTimeout)
			a, err = lh.n.mv.lease(ctx, req)
			cancel()
		case peerAddr(m) == "":
			return
		default:
			a, err = lh.call(m, req)
		}
		if err != nil || a.NotOwner == "" {
			return
		}
		asked[m.Name] = true
		if m = lh.n.member(a.NotOwner); asked[m.Name] {
			time.Sleep(releaseBounce)
		}
	}
}

// wait waits for the lease calls in flight (Node.Run, before the links
// close; each is bounded by leaseCallTimeout). An expiry that fires later
// finds the links closed and gives nothing back: the node is gone, its
// hits stay spent.
func (lh *leaseHolder) wait() {
	lh.callsMu.Lock()
	lh.stopped = true
	lh.callsMu.Unlock()
	lh.wg.Wait()
}

// call makes one lease call to m.
func (lh *leaseHolder) call(m ring.Member, r limit.LeaseRequest) (limit.LeaseGrant, error) {
	l, err := lh.n.peers.link(m)
	if err != nil {
		return limit.LeaseGrant{}, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), leaseCallTimeout)
	defer cancel()
	return l.Lease(ctx, r)
}

// releaseAll gives back every lease this node holds, in parallel, and
// waits for the answers (Node.Leave). Checks decided after it are
// forwarded.
func (lh *leaseHolder) releaseAll() {
	lh.mu.RLock()
	var wg sync.WaitGroup
	for _, e := range lh.keys {
		if g := e.grant.Swap(nil); g != nil {
			wg.Go(func() { lh.giveBack(e, g) })
		}
	}
	lh.mu.RUnlock()
	wg.Wait()
}
