package peer

import (
	"sync/atomic"
	"time"
)

// suspension is the forwarding back-off of one peer. After a forward to the
// peer timed out or was refused, forwarding is suspended for a while: the
// checks bound there go straight to the fail policy instead of each waiting
// for its own timeout, and the first forward after the suspension ends is
// the probe. The suspension starts at first, doubles on each further
// failure up to maxBackoffFactor × first, and a success resets it, so a peer
// that comes back is used again within a fraction of a second
// (Config.PeerBackoff), never after a long latch (docs/ARCHITECTURE.md,
// "Fail policy").
//
// It reads no clock: every method takes the caller's now (Unix ns). Its
// methods are safe for concurrent use; concurrent failures may each extend
// the suspension, which only ever errs on the side of waiting.
type suspension struct {
	first   int64        // ns; > 0
	until   atomic.Int64 // Unix ns before which forwarding is suspended
	backoff atomic.Int64 // the last suspension's length, ns; 0 after a success
	// fresh: Unix ns. A forward sent before it that fails tells nothing of
	// the peer now: a later send was answered, or the suspension was lifted
	// since (a forward sent into a partition times out after the heal).
	fresh atomic.Int64
}

// maxBackoffFactor caps a peer's suspension at this many times the first
// one. Gossip declares a dead peer in ~3 s; until then the suspension keeps
// one unreachable owner from costing every check a timeout. The cap is
// also how long a peer that answers again may wait for its probe: at 20
// (2 s), a forward sent just before a heal timed out after it and kept the
// healed peer's checks on the stand-in for 2.8 s.
const maxBackoffFactor = 10

func newSuspension(first time.Duration) *suspension {
	return &suspension{first: int64(first)}
}

// allow reports whether a forward may be sent at now.
func (s *suspension) allow(now int64) bool { return now >= s.until.Load() }

// failed records a forward sent at sent that timed out or was refused at
// now. It reports whether this failure follows an answer (or is the
// first): the start of an outage. A forward sent before the last answered
// one, or before a lift, changes nothing.
func (s *suspension) failed(now, sent int64) (first bool) {
	if sent < s.fresh.Load() {
		return false
	}
	prev := s.backoff.Load()
	b := min(max(2*prev, s.first), maxBackoffFactor*s.first)
	s.backoff.Store(b)
	s.until.Store(now + b)
	return prev == 0
}

// succeeded records a forward sent at sent that was answered: the next
// failure starts the back-off from first again. It reports whether this
// ends an outage. The common case, no outage, only reads.
func (s *suspension) succeeded(sent int64) (recovered bool) {
	if s.backoff.Load() == 0 {
		return false
	}
	for f := s.fresh.Load(); f < sent && !s.fresh.CompareAndSwap(f, sent); f = s.fresh.Load() {
	}
	return s.backoff.Swap(0) != 0
}

// lift ends the suspension at once, as a success would: the next forward
// is sent, and a failure starts the back-off from first again. Called when
// membership news says the peer's network may be back (Node.rebuild).
func (s *suspension) lift(now int64) {
	s.fresh.Store(now)
	s.until.Store(0)
	s.backoff.Store(0)
}
