package server

import (
	"context"
	"net/netip"
	"runtime"
	"sync"
	"weak"

	"google.golang.org/grpc/peer"
)

// Fair admission: a client listener's bound (NewFairInFlight) shared
// between the parties that use it, so that one flooding client cannot
// starve the others, and charged at a call's headers, so that a call is
// refused before its message is sent.
//
// Who shares. A party is a holder: each gRPC connection is one, and each
// HTTP client address (the connection's remote IP; X-Forwarded-For is not
// read, as any client may write it and pick a fresh share per call; behind
// a proxy, the proxy is one client). HTTP is shared by address rather than
// by connection because an HTTP/1.1 client opens a connection per call in
// flight: per connection, a flood of 256 calls would hold 256 shares.
//
// The rule (fairAdmits). With L the bound, T the units in use, n the
// parties (the open gRPC connections that made a call, the HTTP addresses
// with calls in flight), a holder holding h may take u more units when
// T+u ≤ L and either
//
//   - h+u ≤ L/(n+1), its fair share: the "+1" keeps one share free for a
//     holder that is about to come, so a well-behaved client finds room
//     even while a flood holds everything it may; or
//   - T+u ≤ L − L/8: beyond its share it may borrow what nobody uses, as
//     long as an eighth of the bound stays free for holders under theirs.
//
// and, as for any InFlight, anything is admitted when nothing else is in
// flight (a batch larger than the bound). One connection alone thus holds
// up to 7/8 of the bound (14 batches of 1000 by default, far more than the
// 2 per core the node needs to keep busy); 16 flooding connections hold 14
// batches between them; a client of one check per call is admitted in
// both cases. It is not exact max-min fairness (a borrower keeps what it
// holds until its calls finish: there is no preemption), but no holder
// can take the last eighth while it is over its share. n counts open
// connections, not only those holding units now: counted by the moment,
// 16 flooding connections that each went idle between calls saw shares of
// 2000 while few were busy, filled the bound within their shares, and the
// well-behaved client was refused (measured, before this choice). Idle
// connections only make the shares smaller; the borrowing keeps a lone
// client at 7/8.
//
// Size unknown at the headers. A gRPC call's item count is known only once
// its message is in, which under a flood is long after its headers (the
// message waits behind the connection's flow-control window). So the tap
// reserves a provisional size at the headers, the connection's estimate,
// and the call settles it to its real size once decoded: it gives back the
// difference, or takes the rest under the same rule (and is refused then,
// after its message was read, if the rest does not fit). The estimate
// follows the connection's calls: it rises at once to a larger batch and
// falls by a quarter per smaller one, so a client sending batches of 1000
// is charged 1000 at its headers from its second call on, even when it
// mixes in small calls. A connection's first calls are charged
// firstEstimate. Charging the maximum batch instead would refuse
// concurrent small calls needlessly; charging a unit would let a flood's
// calls in at their headers only to refuse them after their messages, as
// before. HTTP has Content-Length: its calls are charged from it (one
// unit per jsonItemBytes, the size of a small item), a chunked body one
// unit, and settled the same way once decoded. A call its connection's
// estimate puts under headerCharge checks is only checked at its headers
// and charged once decoded (reserveConn says why).
//
// Calls without a holder (BoundChecker: Envoy's ShouldRateLimit, POST
// /json) take units by the total alone and count as beyond their share:
// they leave the last eighth free.
//
// Lifecycle. A reservation made by the tap (a ticket) is claimed by the
// handler, which settles and releases it. grpc may still drop a stream
// after its tap (its deadline passed before grpc looked): so a ticket is
// also released when its call's context ends (context.AfterFunc), unless
// its handler claimed it first. A connection's holder outlives its idle
// moments (it keeps the estimate) and is forgotten once grpc's
// per-connection peer.Peer is collected; an address's holder is forgotten
// when it holds nothing.
//
// Cost: short critical sections (a check or reservation, a settlement, a
// release) per call, and for a call charged at its headers 7 allocations
// (the ticket, its context, the AfterFunc registration); see
// docs/PERFORMANCE.md.

// fairShares is the fair accounting of an InFlight (see above).
type fairShares struct {
	mu     sync.Mutex
	conns  map[weak.Pointer[peer.Peer]]*holder // open gRPC connections
	addrs  map[netip.Addr]*holder              // HTTP clients with calls in flight
	joined int                                 // open Parties (party.go)
}

// holder is one party sharing the bound. Its fields are guarded by
// fairShares.mu.
type holder struct {
	held int64 // units its calls hold, provisional and settled
	est  int64 // units its next call is charged at its headers (connections)
	addr netip.Addr
	byIP bool // an HTTP address: forgotten when it holds nothing
}

// ticket is the units one call (or one stream, batch after batch) holds
// of a fair bound.
type ticket struct {
	b     *InFlight
	h     *holder
	units int64 // held now; under the fairShares lock
	dead  bool  // released when its context ended: holds nothing more
	stop  func() bool
}

// Tuning of the rule and the estimates.
const (
	// spareDiv: a holder beyond its share leaves L/spareDiv free.
	spareDiv = 8
	// firstEstimate is what a connection's calls are charged at their
	// headers before one of them was decoded (clamped to L/16): the
	// batch size of a typical client.
	firstEstimate = 100
	// headerCharge: calls estimated smaller are charged once decoded
	// (reserveConn).
	headerCharge = 32
	// jsonItemBytes is the size of a small JSON item with its separator
	// ({"name":"a","unique_key":"b","limit":1,"duration_ms":1000}, ~60
	// bytes): an HTTP call is charged Content-Length / jsonItemBytes.
	jsonItemBytes = 64
)

// NewFairInFlight returns a bound of limit units whose callers with a
// holder — the gRPC RateLimiter service's calls, HTTP POST
// /v1/GetRateLimits — share it fairly and are charged at their headers
// (see the package's fair admission, fair.go). TryAcquire still takes
// units for callers without one. limit <= 0 means no bound (nil).
func NewFairInFlight(limit int64) *InFlight {
	b := NewInFlight(limit)
	if b != nil {
		b.fair = &fairShares{conns: map[weak.Pointer[peer.Peer]]*holder{}, addrs: map[netip.Addr]*holder{}}
	}
	return b
}

// fairAdmits is the admission rule: may a holder holding held take units
// more of a bound of limit with total in use, of which own belong to the
// same call, while the bound has parties holders (counting this one)?
func fairAdmits(limit, total, own, held, units int64, parties int) bool {
	if total == own {
		return true // nothing else in flight
	}
	if total+units > limit {
		return false
	}
	if held+units <= limit/int64(parties+1) {
		return true
	}
	return total+units <= limit-limit/spareDiv
}

// takeLocked tries to add units to t under the rule; f.mu is held.
func (b *InFlight) takeLocked(t *ticket, units int64) bool {
	f, h := b.fair, t.h
	parties := len(f.conns) + len(f.addrs) + f.joined
	for {
		cur := b.n.Load() // callers without a holder change it without the lock
		if !fairAdmits(b.limit, cur, t.units, h.held, units, parties) {
			return false
		}
		if b.n.CompareAndSwap(cur, cur+units) {
			break
		}
	}
	h.held += units
	t.units += units
	return true
}

// giveLocked returns units of t; f.mu is held.
func (b *InFlight) giveLocked(t *ticket, units int64) {
	f, h := b.fair, t.h
	b.n.Add(-units)
	t.units -= units
	h.held -= units
	if h.held == 0 && h.byIP {
		delete(f.addrs, h.addr)
	}
}

// connHolder returns the holder of the gRPC connection whose stream
// context is ctx: grpc puts one peer.Peer per connection in the contexts of
// all its streams. A context without one shares one holder (nil key).
func (f *fairShares) connHolderLocked(ctx context.Context) *holder {
	p, _ := peer.FromContext(ctx)
	key := weak.Make(p)
	if h := f.conns[key]; h != nil {
		return h
	}
	h := &holder{}
	f.conns[key] = h
	if p != nil {
		// Forget the connection once grpc has dropped its peer.Peer: the
		// connection and every stream of it are gone.
		runtime.AddCleanup(p, func(k weak.Pointer[peer.Peer]) {
			f.mu.Lock()
			delete(f.conns, k)
			f.mu.Unlock()
		}, key)
	}
	return h
}

// reserveConn charges a gRPC call on the connection of ctx its estimate,
// at its headers. It returns ctx carrying the ticket, or false when the
// call must be refused. The ticket is released when ctx ends unless a
// handler claims it first (claimTicket).
//
// A call estimated under headerCharge units is only checked: refused if a
// call of its estimate would not be admitted now, else passed on without
// a ticket, to be charged once decoded (connTicket). Its message is a few
// hundred bytes that arrive with its headers, so charging it earlier would
// gain nothing, and the ticket's context and expiry cost a batch of one
// check ~8% of its server CPU (docs/PERFORMANCE.md).
func (b *InFlight) reserveConn(ctx context.Context) (context.Context, bool) {
	f := b.fair
	t := &ticket{b: b}
	f.mu.Lock()
	t.h = f.connHolderLocked(ctx)
	if t.h.est == 0 {
		t.h.est = max(1, min(firstEstimate, b.limit/16))
	}
	if est := t.h.est; est < headerCharge {
		ok := fairAdmits(b.limit, b.n.Load(), 0, t.h.held, est, len(f.conns)+len(f.addrs)+f.joined)
		f.mu.Unlock()
		return ctx, ok
	}
	ok := b.takeLocked(t, t.h.est)
	f.mu.Unlock()
	if !ok {
		return ctx, false
	}
	t.stop = context.AfterFunc(ctx, t.expire)
	return context.WithValue(ctx, ticketKey{}, t), true
}

// connTicket makes t an empty ticket of the connection of ctx (a stream's
// context) on a fair bound b, for a call the tap did not charge: settle
// charges it. It returns nil when b is not fair.
func (b *InFlight) connTicket(ctx context.Context, t *ticket) *ticket {
	if b == nil || b.fair == nil {
		return nil
	}
	b.fair.mu.Lock()
	*t = ticket{b: b, h: b.fair.connHolderLocked(ctx)}
	b.fair.mu.Unlock()
	return t
}

// reserveAddr charges an HTTP call from addr units at its headers; nil
// and false when it must be refused. On a bound without fair sharing (or
// none) the ticket takes units by the total alone.
func (b *InFlight) reserveAddr(addr netip.Addr, units int64) (*ticket, bool) {
	if b == nil {
		return nil, true
	}
	t := &ticket{b: b, h: &holder{}}
	if b.fair == nil {
		if !b.TryAcquire(units) {
			return nil, false
		}
		t.units = units
		return t, true
	}
	f := b.fair
	f.mu.Lock()
	defer f.mu.Unlock()
	h := f.addrs[addr]
	if h == nil {
		h = &holder{addr: addr, byIP: true}
		f.addrs[addr] = h
	}
	t.h = h
	if !b.takeLocked(t, units) {
		if h.held == 0 {
			delete(f.addrs, addr)
		}
		return nil, false
	}
	return t, true
}

// ticketKey is the context key of a call's ticket.
type ticketKey struct{}

// claimTicket returns the ticket the tap reserved for the call of ctx, nil
// when there is none, and whether it is still valid: false when the
// call's context ended first and released it (the call is canceled). The
// caller then settles and releases it.
func claimTicket(ctx context.Context) (*ticket, bool) {
	t, _ := ctx.Value(ticketKey{}).(*ticket)
	if t == nil {
		return nil, true
	}
	if t.stop != nil && !t.stop() {
		return nil, false
	}
	t.stop = nil
	return t, true
}

// expire releases an unclaimed ticket when its call's context ends.
func (t *ticket) expire() {
	f := t.b.fair
	f.mu.Lock()
	t.dead = true
	if t.units > 0 {
		t.b.giveLocked(t, t.units)
	}
	f.mu.Unlock()
}

// settle makes t hold units (a call's real size, at least 1): it gives
// back what it holds beyond, or takes the rest under the rule and reports
// false when that does not fit (t then holds nothing). A connection's
// estimate learns from it. A nil ticket admits everything.
func (t *ticket) settle(units int64) bool {
	if t == nil {
		return true
	}
	units = max(units, 1)
	b := t.b
	if b.fair == nil {
		if units > t.units {
			if !b.tryAcquireOwn(units-t.units, t.units) {
				t.release()
				return false
			}
		} else {
			b.Release(t.units - units)
		}
		t.units = units
		return true
	}
	f := b.fair
	f.mu.Lock()
	defer f.mu.Unlock()
	if !t.h.byIP {
		t.h.est = max(units, t.h.est-(t.h.est+3)/4) // a quarter, rounded up: small ones reach 1
	}
	switch {
	case t.dead:
		return false
	case units < t.units:
		b.giveLocked(t, t.units-units)
	case units > t.units && !b.takeLocked(t, units-t.units):
		if t.units > 0 {
			b.giveLocked(t, t.units)
		}
		return false
	}
	return true
}

// release gives back everything t holds; t may be settled again (the next
// batch of a stream).
func (t *ticket) release() {
	if t == nil || t.units == 0 {
		return
	}
	b := t.b
	if b.fair == nil {
		b.Release(t.units)
		t.units = 0
		return
	}
	b.fair.mu.Lock()
	if t.units > 0 {
		b.giveLocked(t, t.units)
	}
	b.fair.mu.Unlock()
}

// Holders returns the parties the bound is shared between now (open gRPC
// connections that made a call, HTTP client addresses with calls in
// flight), 0 for a bound without fair sharing.
func (b *InFlight) Holders() int {
	if b == nil || b.fair == nil {
		return 0
	}
	b.fair.mu.Lock()
	defer b.fair.mu.Unlock()
	return len(b.fair.conns) + len(b.fair.addrs) + b.fair.joined
}

// httpUnits is what an HTTP call with a body of length bytes (-1:
// unknown) is charged at its headers.
func httpUnits(length int64, maxBatch int) int64 {
	if length <= 0 {
		return 1
	}
	return min(max(1, length/jsonItemBytes), int64(maxBatch))
}
