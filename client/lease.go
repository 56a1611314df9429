package client

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/shardlimiter/shardlimiter/limit"
	"github.com/shardlimiter/shardlimiter/transport"
	"github.com/shardlimiter/shardlimiter/transport/dial"
)

// Leases, the client's side (Config.Leases; the nodes' side is api/lease
// and peer/lease.go, the design docs/ARCHITECTURE.md "Leases"). A key this
// client checks more often than Config.LeaseThreshold is decided here from
// a lease of its owner's capacity, which the owner has already debited
// from the key: the client spends it and nothing else, so the cluster
// never admits more than the owner alone would.
//
// The check path (Check) only reads and spends: a lease's hits are one
// atomic counter per key, taken by CAS; a check that finds too few goes to
// the owner as before. Asking for a lease and renewing it run in a
// goroutine per call (at most one per key at a time), started by a check
// that finds the lease low; the sweep ends leases at their expiry and
// gives back what is left, as Close does for all of them.

const (
	// leaseWindow is the span over which a key's rate of checks is
	// measured.
	leaseWindow = 100 * time.Millisecond
	// leaseSpan is how much of its demand the client asks for: its rate
	// times this. It renews at half of its last grant or half of its
	// life, whichever comes first.
	leaseSpan = 200 * time.Millisecond
	// leaseMargin is how much earlier than the owner the client ends a
	// lease: its TTL starts at the request, before the owner's, and
	// stops earlier still so that its release finds the owner's record.
	leaseMargin = 100 * time.Millisecond
	// leaseBackoff is how long the client waits to ask again for a key
	// that was granted nothing (near its limit, or the call failed).
	leaseBackoff = 100 * time.Millisecond
	// leaseRefusedBackoff is how long it waits after a node refused it
	// leases (PermissionDenied, or no lease service).
	leaseRefusedBackoff = 30 * time.Second
	// leaseSweep is the period of the sweep that ends expired leases.
	leaseSweep = 25 * time.Millisecond
	// maxLeaseKeys bounds the keys tracked for leases.
	maxLeaseKeys = 4096
	// leaseIdle is how long a tracked key without a lease is kept.
	leaseIdle = 5 * time.Second
)

// clockBase anchors the lease clock: the instants of leases are
// nanoseconds since it, read from the monotonic clock alone (time.Since),
// which costs a check about half of what time.Now does. They never leave
// the process; a Result's ResetAt is converted (unixOf).
var clockBase = time.Now()

func leaseNow() int64 { return int64(time.Since(clockBase)) }

// unixOf converts an instant of the lease clock to Unix nanoseconds.
func unixOf(t int64) int64 { return clockBase.UnixNano() + t }

// LeaseStats are the client's leases so far (Config.Leases).
type LeaseStats struct {
	Decided  uint64 // checks decided from a lease or a deny lease
	Granted  uint64 // grants received (renewals included)
	Denied   uint64 // deny leases received: a key over its limit
	Released uint64 // leases ended with hits given back
	Held     int64  // hits held now, all keys
	// Err is the last failure of a lease call, nil when none; a node's
	// refusal wraps transport.ErrPermissionDenied.
	Err error
}

// LeaseStats returns the client's lease statistics; zero without
// Config.Leases.
func (c *Client) LeaseStats() LeaseStats {
	lh := c.leases
	if lh == nil {
		return LeaseStats{}
	}
	s := LeaseStats{Granted: lh.granted.Load(), Denied: lh.denied.Load(), Released: lh.released.Load()}
	decided := lh.forgotten.Load()
	lh.keys.Range(func(_, v any) bool {
		e := v.(*heldKey)
		decided += e.decided.Load()
		s.Held += e.tokens.Load()
		return true
	})
	s.Decided = uint64(decided)
	if e := lh.lastErr.Load(); e != nil {
		s.Err = *e
	}
	return s
}

// leaseHolder is the client's leases and the demand of the keys it
// checks. Its methods are safe for concurrent use.
type leaseHolder struct {
	c         *Client
	instance  string // this client's name for the nodes
	threshold int64  // checks per second

	keys    sync.Map // leaseKey → *heldKey
	tracked atomic.Int64
	kick    chan struct{} // cap 1: a key is tracked, the sweep has work

	mu     sync.Mutex
	closed bool           // guarded by mu: no lease call starts after it
	wg     sync.WaitGroup // lease calls in flight; Add under mu, while !closed

	refusedUntil              atomic.Int64 // lease clock: no lease is asked for before it
	lastErr                   atomic.Pointer[error]
	forgotten                 atomic.Int64 // checks decided by keys no longer tracked
	granted, denied, released atomic.Uint64
}

type leaseKey struct{ name, key string }

// heldKey is one key's lease and demand. The fields every check writes
// share a cache line of their own, apart from those it only reads.
type heldKey struct {
	grant atomic.Pointer[heldGrant]
	deny  atomic.Int64 // refuse the key's checks until this instant (lease clock)
	win   atomic.Int64 // start of the rate window (lease clock)
	rate  atomic.Int64 // checks per second, last window
	used  atomic.Int64 // last check (lease clock, to the millisecond)
	ask   atomic.Int64 // do not ask before this instant (lease clock)
	busy  atomic.Bool  // a lease call or an expiry is in flight
	id    leaseKey
	rule  limit.Rule
	_     [64]byte

	tokens  atomic.Int64 // hits left in the lease
	count   atomic.Int64 // checks in the rate window
	decided atomic.Int64 // checks decided here
	_       [40]byte
}

// heldGrant is one grant as the client holds it.
type heldGrant struct {
	owner   string // the granting node's name
	to      *dest  // where to release it
	id      uint64
	hits    int64
	expires int64 // lease clock
}

func newLeaseHolder(c *Client, threshold float64) *leaseHolder {
	var b [8]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	if threshold <= 0 {
		threshold = 100
	}
	return &leaseHolder{c: c, instance: hex.EncodeToString(b[:]), threshold: max(int64(threshold), 1), kick: make(chan struct{}, 1)}
}

// leasable reports whether chk may be decided from a lease: one token
// bucket check with hits, its rule given (not named from the rules file),
// without warm-up or behavior flags.
func leasable(chk *limit.Check) bool {
	r := &chk.Rule
	return !chk.Chained && chk.Hits > 0 && chk.Hits <= limit.MaxHits && r.Algorithm == limit.TokenBucket &&
		r.Limit > 0 && r.Warmup == 0 && r.Behavior == 0
}

// decide answers chk from the key's lease or deny lease, and reports
// false when the check is to be sent to its owner. It never blocks.
func (lh *leaseHolder) decide(chk *limit.Check, res *limit.Result) bool {
	now := leaseNow()
	e := lh.entry(chk, now)
	if e == nil || e.rule != chk.Rule {
		return false
	}
	e.observe(now)
	if until := e.deny.Load(); now < until {
		*res = limit.Result{Decision: limit.Decision{ResetAt: unixOf(until) + capacityTime(chk.Rule), RetryAfter: time.Duration(until - now)}}
		e.decided.Add(1)
		return true
	}
	g := e.grant.Load()
	if g == nil || now >= g.expires {
		lh.renew(e, now)
		return false
	}
	for {
		t := e.tokens.Load()
		if t < chk.Hits {
			lh.renew(e, now)
			return false
		}
		if e.tokens.CompareAndSwap(t, t-chk.Hits) {
			left := t - chk.Hits
			c := chk.Rule.Capacity()
			*res = limit.Result{Owner: g.owner, Decision: limit.Decision{Allowed: true, Remaining: left,
				ResetAt: unixOf(now) + int64(float64(capacityTime(chk.Rule))*float64(max(c-left, 0))/float64(c))}}
			e.decided.Add(1)
			if left*2 < g.hits || g.expires-now < int64(leaseSpan)/2 {
				lh.renew(e, now)
			}
			return true
		}
	}
}

// capacityTime is how long an empty bucket of r takes to refill.
func capacityTime(r limit.Rule) int64 {
	return int64(r.Period) / r.Limit * r.Capacity()
}

// observe counts a check in the key's rate window.
func (e *heldKey) observe(now int64) {
	if e.used.Load() < now-int64(time.Millisecond) {
		e.used.Store(now) // coarse: spares the hot key a store per check
	}
	e.count.Add(1)
	if w := e.win.Load(); now-w >= int64(leaseWindow) && e.win.CompareAndSwap(w, now) {
		c := e.count.Swap(0)
		if w != 0 {
			e.rate.Store(c * int64(time.Second) / (now - w))
		}
	}
}

// entry returns chk's tracked key, adding it when there is room and chk
// is valid; nil otherwise.
func (lh *leaseHolder) entry(chk *limit.Check, now int64) *heldKey {
	id := leaseKey{chk.Name, chk.Key}
	if e, ok := lh.keys.Load(id); ok {
		return e.(*heldKey)
	}
	if lh.tracked.Load() >= maxLeaseKeys || chk.Validate() != nil {
		return nil
	}
	e := &heldKey{id: leaseKey{string([]byte(chk.Name)), string([]byte(chk.Key))}, rule: chk.Rule}
	e.used.Store(now)
	if got, loaded := lh.keys.LoadOrStore(e.id, e); loaded {
		return got.(*heldKey)
	}
	if lh.tracked.Add(1) == 1 {
		select {
		case lh.kick <- struct{}{}:
		default:
		}
	}
	return e
}

// start runs f in a tracked goroutine unless the holder is closed.
func (lh *leaseHolder) start(f func()) bool {
	lh.mu.Lock()
	defer lh.mu.Unlock()
	if lh.closed {
		return false
	}
	lh.wg.Go(f)
	return true
}

// renew starts a lease call for e when its demand passes the threshold
// and none is in flight or backing off.
func (lh *leaseHolder) renew(e *heldKey, now int64) {
	if e.rate.Load() < lh.threshold || now < e.ask.Load() || now < lh.refusedUntil.Load() || !e.busy.CompareAndSwap(false, true) {
		return
	}
	if !lh.start(func() { defer e.busy.Store(false); lh.ask(e) }) {
		e.busy.Store(false)
	}
}

// tableKey is the node's key of id: the rule name's length as a uvarint,
// the name, the unique key.
func tableKey(id leaseKey) string {
	b := binary.AppendUvarint(make([]byte, 0, binary.MaxVarintLen16+len(id.name)+len(id.key)), uint64(len(id.name)))
	return string(append(append(b, id.name...), id.key...))
}

// ask asks the key's owner for a grant for e and installs what it gets.
// A node that is not the owner names the owner, which is asked once.
func (lh *leaseHolder) ask(e *heldKey) {
	r := lh.c.routes.Load()
	if r == nil {
		e.ask.Store(leaseNow() + int64(leaseBackoff)) // no ring: no owner to ask
		return
	}
	i := r.snap.OwnerIndex(e.id.key)
	start := leaseNow()
	want := min(max(e.rate.Load()*int64(leaseSpan)/int64(time.Second), 1), e.rule.Capacity())
	req := limit.LeaseRequest{From: lh.instance, Key: tableKey(e.id), Rule: e.rule, Want: want}
	g, err := lh.call(r.dests[i], req)
	if err == nil && g.NotOwner != "" {
		if j := r.snap.IndexOf(g.NotOwner); j >= 0 && j != i {
			i = j
			g, err = lh.call(r.dests[i], req)
		}
	}
	switch {
	case err != nil || g.NotOwner != "" || (g.Hits == 0 && g.Deny == 0):
		e.ask.Store(start + int64(leaseBackoff))
		return
	case g.Deny > 0:
		lh.denied.Add(1)
		e.deny.Store(start + int64(g.Deny))
		return
	}
	lh.granted.Add(1)
	e.grant.Store(&heldGrant{owner: r.snap.Member(i).Name, to: r.dests[i], id: g.ID, hits: g.Hits,
		expires: start + int64(g.TTL) - int64(leaseMargin)})
	e.tokens.Add(g.Hits)
}

// call makes one lease call to d, noting a failure; a refusal of leases
// stops the asking for leaseRefusedBackoff.
func (lh *leaseHolder) call(d *dest, r limit.LeaseRequest) (limit.LeaseGrant, error) {
	g, err := d.bc.Lease(context.Background(), r)
	if err != nil {
		lh.lastErr.Store(&err)
		if errors.Is(err, transport.ErrPermissionDenied) || errors.Is(err, dial.ErrNoLeases) {
			lh.refusedUntil.Store(leaseNow() + int64(leaseRefusedBackoff))
		}
	}
	return g, err
}

// giveBack takes what is left of e's lease out of use and releases it to
// the node that granted g, e's last grant, or, when the key has moved (the
// node answers NotOwner, or has left the ring), to the key's owner now:
// the owner's records of the grants travel with the key's state. A
// release that fails leaves the hits spent: under-admission, never
// over-admission (a failed call is not sent again elsewhere: it may have
// been credited).
func (lh *leaseHolder) giveBack(e *heldKey, g *heldGrant) {
	left := e.tokens.Swap(0)
	if left == 0 {
		return
	}
	req := limit.LeaseRequest{From: lh.instance, Key: tableKey(e.id), Rule: e.rule, Release: g.id, Leftover: left}
	to := g.to
	r := lh.c.routes.Load()
	if r != nil && r.snap.IndexOf(g.owner) < 0 { // the grantor is gone
		to = r.dests[r.snap.OwnerIndex(e.id.key)]
	}
	// Two nodes may each name the other for a moment (the old owner has
	// handed the key over, the new one's ring does not give it the key
	// yet): the release then asks again after releaseBounce, at most
	// releaseHops calls in all, as a node's release does
	// (peer/leasehold.go). Only NotOwner, which credited nothing, is
	// followed.
	asked := map[*dest]bool{}
	for range releaseHops {
		a, err := lh.call(to, req)
		if err != nil {
			return
		}
		if a.NotOwner == "" {
			lh.released.Add(1)
			return
		}
		j := -1
		if r != nil {
			j = r.snap.IndexOf(a.NotOwner)
		}
		if j < 0 {
			return // a node this client's ring does not have
		}
		asked[to] = true
		if to = r.dests[j]; asked[to] {
			time.Sleep(releaseBounce)
		}
	}
}

const (
	// releaseHops bounds the calls of one release that follow NotOwner
	// answers; releaseBounce is the pause before asking a node again.
	releaseHops   = 4
	releaseBounce = 50 * time.Millisecond
)

// sweep ends the leases that expire before the next sweep and forgets idle
// keys, every leaseSweep until ctx is done; while no key is tracked it
// sleeps until one is (an idle client costs no wake-ups).
func (lh *leaseHolder) sweep(ctx context.Context) {
	t := time.NewTimer(leaseSweep)
	defer t.Stop()
	for {
		if lh.tracked.Load() == 0 {
			select {
			case <-ctx.Done():
				return
			case <-lh.kick:
			}
		}
		t.Reset(leaseSweep)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now := leaseNow()
		lh.keys.Range(func(k, v any) bool {
			lh.sweepKey(v.(*heldKey), now)
			return true
		})
	}
}

// sweepKey ends e's lease if it expires before the next sweep, or forgets
// e when it has been idle for leaseIdle. A key with a lease call in flight
// is left to the next sweep: the call may be installing a grant.
func (lh *leaseHolder) sweepKey(e *heldKey, now int64) {
	if !e.busy.CompareAndSwap(false, true) {
		return
	}
	g := e.grant.Load()
	switch {
	case g != nil && g.expires-now <= int64(leaseSweep):
		e.grant.Store(nil)
		if !lh.start(func() { defer e.busy.Store(false); lh.giveBack(e, g) }) {
			e.grant.Store(g) // closing: close gives it back
			e.busy.Store(false)
		}
		return
	case g == nil && now-e.used.Load() > int64(leaseIdle) && now >= e.deny.Load():
		if lh.keys.CompareAndDelete(e.id, e) {
			// e stays busy: a check that found it before the delete can
			// start no lease call on it, which nobody would end.
			lh.tracked.Add(-1)
			lh.forgotten.Add(e.decided.Load()) // a check may still count on e: a stat, not a bound
			return
		}
	}
	e.busy.Store(false)
}

// close stops new lease calls, waits for those in flight, then gives back
// every lease, in parallel, and waits for the answers (Client.Close,
// before the connections close).
func (lh *leaseHolder) close() {
	lh.mu.Lock()
	lh.closed = true
	lh.mu.Unlock()
	lh.wg.Wait()
	var wg sync.WaitGroup
	lh.keys.Range(func(_, v any) bool {
		e := v.(*heldKey)
		if g := e.grant.Swap(nil); g != nil {
			wg.Go(func() { lh.giveBack(e, g) })
		}
		return true
	})
	wg.Wait()
}
