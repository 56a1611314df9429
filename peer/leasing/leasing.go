// Package leasing holds the rules of leases (docs/ARCHITECTURE.md,
// "Leases") that do not depend on the node: which checks may be decided
// from a lease, how long a grant may live, and what a lessee answers. It
// is pure: time is a parameter, nothing is started or logged.
package leasing

import (
	"time"

	"github.com/shardlimiter/shardlimiter/limit"
	"github.com/shardlimiter/shardlimiter/window"
)

// Leasable reports whether checks under r may be decided from a lease: a
// grant of n hits must be a take of n hits that the owner alone could
// have made at the grant, whose leftover can be given back exactly.
// That holds for a token bucket and for fixed and sliding windows, without warm-up or behavior flags. Not for
// LEAKY_BUCKET (a hit's admission depends on when it drains, not only on
// a count), SLIDING_LOG (each hit is a timestamp the lessee would stamp
// later than the grant, and a minimum interval spaces single hits), nor
// COUNT_REJECTED, OVERDRAFT or RESET (their decisions change the state
// on refusals or unconditionally), nor gubernator's algorithms (a refusal
// sets a sticky over-limit status every later answer of the window
// reports, which a lessee's local refusal would not set).
func Leasable(r limit.Rule) bool {
	if r.Warmup != 0 || r.Behavior != 0 || r.NoLease || r.Calendar != limit.NoCalendar {
		return false
	}
	switch r.Algorithm {
	case limit.TokenBucket, limit.FixedWindow, limit.SlidingWindow:
		return true
	}
	return false
}

// Windowed reports whether r's algorithm counts in windows, whose leases
// end with the window they were granted in.
func Windowed(r limit.Rule) bool {
	return r.Algorithm == limit.FixedWindow || r.Algorithm == limit.SlidingWindow
}

// TTL returns how long a grant made at now under r lives: ttl, cut to
// the end of the window now is in for a windowed rule (a lease never
// outlives its window), and the window's end, 0 when r has none. A grant
// of less than least is not worth making: ok is false.
func TTL(r limit.Rule, now int64, ttl, least time.Duration) (d time.Duration, end int64, ok bool) {
	if !Windowed(r) {
		return ttl, 0, true
	}
	end = window.End(r, now)
	d = time.Duration(end - now)
	if d < least {
		return 0, end, false
	}
	return min(d, ttl), end, true
}

// SameWindow reports whether instants a and b are in one window of r;
// always for a rule without windows.
func SameWindow(r limit.Rule, a, b int64) bool {
	return !Windowed(r) || window.End(r, a) == window.End(r, b)
}

// Creditable reports whether hits of a grant whose window ends at end (0:
// no window) may be credited back at now: only within that window.
func Creditable(end, now int64) bool { return end == 0 || now < end }

// Size is the size of a grant: what the lessee wants, at most a fair
// share of what the key has left among its lessees and its owner, and
// nothing once less than a quarter of the capacity is left, where the
// owner decides every check again.
func Size(want, remaining, capacity int64, lessees int) int64 {
	if remaining*4 < capacity {
		return 0
	}
	return max(min(want, remaining/int64(lessees+2)), 0)
}

// ResetAt is the reset instant a lessee answers for a check of r admitted
// at now from its lease, leaving left: when a token bucket would be full
// again if nothing more were taken, or the end of the window.
func ResetAt(r limit.Rule, now, left int64) int64 {
	if Windowed(r) {
		return window.End(r, now)
	}
	c := r.Capacity()
	return now + int64(float64(fillTime(r))*float64(max(c-left, 0))/float64(c))
}

// DenyResetAt is the reset instant a lessee answers for a check it
// refuses under a deny lease that lasts until until.
func DenyResetAt(r limit.Rule, until int64) int64 {
	if Windowed(r) {
		return window.End(r, until)
	}
	return until + fillTime(r)
}

// fillTime is how long an empty bucket of r takes to refill.
func fillTime(r limit.Rule) int64 {
	return int64(r.Period) / r.Limit * r.Capacity()
}
