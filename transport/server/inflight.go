package server

import (
	"runtime"
	"sync/atomic"

	"github.com/shardlimiter/shardlimiter/transport"
)

// InFlight bounds the units of work in progress at once on a node: checks
// being decided, or request-body bytes being read. It is a counting
// semaphore that never waits: TryAcquire either takes the units at once or
// refuses, so that a node past its capacity answers "overloaded" in
// microseconds instead of queueing work it cannot finish in time (the
// queue would only add latency to every call, and memory, until clients
// time out).
//
// One rule keeps the bound from refusing legal work: a request larger than
// the whole bound is admitted when nothing else is in flight. So a batch of
// MaxBatch items always gets through on an idle node, whatever the bound.
//
// The fast path is one atomic load and one compare-and-swap; there is no
// lock and no channel. The methods are safe for concurrent use. A nil
// *InFlight admits everything.
type InFlight struct {
	_     [64]byte // keep n on a cache line of its own
	n     atomic.Int64
	_     [56]byte
	limit int64
	fair  *fairShares // nil: no fair sharing (NewInFlight)
}

// NewInFlight returns a bound of limit units; limit <= 0 means no bound
// (nil).
func NewInFlight(limit int64) *InFlight {
	if limit <= 0 {
		return nil
	}
	return &InFlight{limit: limit}
}

// TryAcquire takes units (> 0) if they fit under the bound, or if nothing
// is in flight; it reports whether it did. It never blocks. The caller
// must Release the same units once the work is done.
func (b *InFlight) TryAcquire(units int64) bool {
	return b.tryAcquireLeaving(units, 0)
}

// tryAcquireOwn is TryAcquire for more units of a call that holds own
// already: the idle rule applies when only those are in flight.
func (b *InFlight) tryAcquireOwn(units, own int64) bool {
	for {
		cur := b.n.Load()
		if cur != own && cur+units > b.limit {
			return false
		}
		if b.n.CompareAndSwap(cur, cur+units) {
			return true
		}
	}
}

// tryAcquireLeaving is TryAcquire for work that must leave spare units
// free for others (see bodyReservation); the idle rule still applies.
func (b *InFlight) tryAcquireLeaving(units, spare int64) bool {
	if b == nil {
		return true
	}
	for {
		cur := b.n.Load()
		if cur != 0 && cur+units > b.limit-spare {
			return false
		}
		if b.n.CompareAndSwap(cur, cur+units) {
			return true
		}
	}
}

// acquireChecks takes one unit per check of a call on listener (one for an
// empty call, which still costs a round of work), or counts the refusal
// in m and returns errShed. The caller releases the units it got. A
// listener of -1 counts nothing. On a fair bound such a call has no
// holder and counts as beyond its share: it leaves spare() free.
func (b *InFlight) acquireChecks(n int, m *Metrics, listener int) (int64, error) {
	units := int64(max(n, 1))
	if !b.tryAcquireLeaving(units, b.spare()) {
		if listener >= 0 {
			m.shed(listener, shedChecks)
		}
		return 0, errShed
	}
	return units, nil
}

// spare is what callers without a holder leave free of a fair bound (for
// the parties under their share, fair.go); 0 for other bounds.
func (b *InFlight) spare() int64 {
	if b == nil || b.fair == nil {
		return 0
	}
	return b.limit / spareDiv
}

// full reports whether a call without a holder could not take one unit.
func (b *InFlight) full() bool {
	return b != nil && b.InUse() >= b.Limit()-b.spare()
}

// Release gives back units taken by TryAcquire.
func (b *InFlight) Release(units int64) {
	if b != nil {
		b.n.Add(-units)
	}
}

// InUse returns the units in flight now.
func (b *InFlight) InUse() int64 {
	if b == nil {
		return 0
	}
	return b.n.Load()
}

// Limit returns the bound, 0 for none.
func (b *InFlight) Limit() int64 {
	if b == nil {
		return 0
	}
	return b.limit
}

// DefaultInFlightChecks returns the default bound on client checks in flight
// on one node for batches of at most maxBatch items: 8 full batches per
// CPU the Go runtime may use.
//
// Why 8 × GOMAXPROCS × maxBatch: a node decides a check in about 2 µs of
// CPU (docs/PERFORMANCE.md), so a full batch of 1000 holds a core ~2 ms.
// With 8 full batches per core in flight, the last admitted batch waits at
// most ~16 ms of CPU behind the others — well under clients' deadlines —
// while 8 per core is enough concurrency to keep every core busy through
// network and scheduling gaps (the load tool reaches the single-node
// maximum with 32 callers of batch 100, 3,200 checks, far under the
// default 16,000 on 2 cores). Past it, the queue would add latency and
// memory without adding throughput. See docs/PERFORMANCE.md, "Overload and
// connection limits", for the measurement.
func DefaultInFlightChecks(maxBatch int) int64 {
	if maxBatch <= 0 {
		maxBatch = transport.DefaultMaxBatch
	}
	return 8 * int64(runtime.GOMAXPROCS(0)) * int64(maxBatch)
}

// DefaultPeerInFlightChecks returns the default bound on forwarded checks
// (and state keys) in flight on one node's peer listener: twice the
// client bound. Every node's client bound already limits what it can
// forward, so this bound only matters when the keys of several nodes'
// traffic pile up on one owner; shedding there sends the checks to the
// senders' fail policy (less exact), so it is generous.
func DefaultPeerInFlightChecks(maxBatch int) int64 {
	return 2 * DefaultInFlightChecks(maxBatch)
}
