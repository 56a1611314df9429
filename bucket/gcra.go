package bucket

import (
	"math"
	"time"

	"github.com/shardlimiter/shardlimiter/internal/wide"
	"github.com/shardlimiter/shardlimiter/limit"
)

// Time bounds. Takes clamp now into [minNow, maxNow] so that a theoretical
// arrival time plus the largest debt (MaxCapacityTime + MaxPeriod) always
// fits in an int64, and so that a stored word of 0 (a fresh key) is in the
// past. maxNow is in the year 2116.
const (
	minNow = 1
	maxNow = 1 << 62
)

func clampNow(now int64) int64 { return min(max(now, minNow), maxNow) }

// idleSlack is how long a key must have been back to a fresh key's state
// before Sweep retires it. The node reads the clock for a batch of takes
// before it runs them, and the sweep reads it again later: a take may carry
// a now a little older than the sweep's. Retiring a key that is idle at the
// sweep's now but not yet at the take's would hand that take a full bucket
// early; the slack covers that skew.
const idleSlack = int64(time.Second)

// rate is a rule reduced to what the GCRA arithmetic needs.
//
// A hit costs one emission interval, period/limit rounded UP to a whole
// nanosecond (at least 1 ns), and the bucket holds capacity intervals.
// Rounding the interval once, rather than each call's cost, keeps the
// arithmetic exact in whole hits: a full bucket admits exactly capacity
// hits at one instant whatever period/limit is (rounding every cost up
// instead loses a nanosecond per call, and with it the last hit of a
// burst whenever period/limit is not a whole number). The price is a
// refill rate at most 1 ns per hit slower than the rule: under 0.1% for
// any interval of a microsecond or more, and rules faster than one hit per
// nanosecond per key are held to one per nanosecond. Never faster than the
// rule: the exact bound capacity + span×limit/period always holds.
type rate struct {
	limit    int64 // hits per period, 1..limit.MaxLimit
	period   int64 // ns
	capacity int64 // hits the bucket holds (LEAKY_BUCKET: queue depth + 1)
	shaping  bool  // report the wait ahead of admitted hits as Delay
}

// interval returns the cost of one hit: ⌈period/limit⌉ ns, at least 1.
func (p rate) interval() int64 { return max((p.period+p.limit-1)/p.limit, 1) }

// tau returns the time a full capacity takes to drain: the rule's size in
// time, used to rescale state across rule changes.
func (p rate) tau() int64 { return wide.Mul(p.capacity, p.interval()) }

// maxDebt bounds how far ahead of now COUNT_REJECTED or OVERDRAFT may push
// the theoretical arrival time: one full capacity plus one period. A client
// that keeps hammering is therefore locked out for at most one period
// (plus one hit's interval) after it stops, whatever it sent.
func (p rate) maxDebt() int64 { return p.tau() + p.period }

// cost returns the time hits take at the rule's rate.
func (p rate) cost(hits int64) int64 { return wide.Mul(hits, p.interval()) }

// fits reports whether hits can be admitted when the state is debt ns
// ahead of now: debt + hits×interval ≤ capacity×interval.
func (p rate) fits(debt, hits int64) bool {
	return hits <= p.capacity && debt <= wide.Mul(p.capacity-hits, p.interval())
}

// remaining returns how many hits one call could be admitted with when the
// state is debt ns ahead of now.
func (p rate) remaining(debt int64) int64 {
	i := p.interval()
	return max(p.capacity-(debt+i-1)/i, 0)
}

// verdict is a decision before it is dressed as a limit.Decision (a
// struct of four words travels in registers; Decision does not): whether
// the hits were admitted, the debt after the call, and the wait, which is
// the shaping delay of an admitted call or the RetryAfter of a rejected one.
type verdict struct {
	allowed bool
	debt    int64
	wait    int64
}

// take applies hits at now to a key whose theoretical arrival time is tat
// and returns the new tat and the verdict. It is pure. A peek (hits ≤ 0)
// answers as a check of one hit would, and changes nothing; under
// limit.Overdraft it is refused only when the bucket is overdrawn (debt
// beyond the capacity). Rejected hits are charged under
// limit.CountRejected or limit.Overdraft, up to maxDebt.
func (p rate) take(tat, now, hits int64, b limit.Behavior) (int64, verdict) {
	base := max(tat, now) // a tat in the past means a full bucket, not credit
	debt := base - now
	if hits <= 0 {
		ask := int64(1)
		if b.Has(limit.Overdraft) {
			ask = 0
		}
		switch {
		case p.fits(debt, 1):
			return tat, verdict{allowed: true, debt: debt, wait: debt}
		case ask == 0 && p.fits(debt, 0):
			// Not overdrawn, though no hit fits: no shaping delay to report.
			return tat, verdict{allowed: true, debt: debt}
		}
		return tat, p.rejected(debt, ask)
	}
	if p.fits(debt, hits) {
		nt := base + p.cost(hits)
		return nt, verdict{allowed: true, debt: nt - now, wait: debt}
	}
	if b&(limit.CountRejected|limit.Overdraft) != 0 {
		// Charge the rejected hits, but never past maxDebt and never
		// backwards (debt may already exceed the cap after a clock step).
		nt := base + max(min(p.cost(hits), p.maxDebt()-debt), 0)
		return nt, p.rejected(nt-now, hits)
	}
	return tat, p.rejected(debt, hits)
}

// rejected is the verdict on hits that do not fit when the state is debt
// ns ahead of now. RetryAfter is exact: at now+RetryAfter the hits fit, one
// nanosecond earlier they do not.
func (p rate) rejected(debt, hits int64) verdict {
	if hits > p.capacity {
		return verdict{debt: debt, wait: int64(limit.Never)}
	}
	return verdict{debt: debt, wait: debt - wide.Mul(p.capacity-hits, p.interval())}
}

// decision dresses v, reached at now, as a limit.Decision.
func (p rate) decision(now int64, v verdict) limit.Decision {
	// Built in one literal from locals: assembling a five-word struct field
	// by field costs more here than the GCRA arithmetic.
	var retry, delay time.Duration
	switch {
	case !v.allowed:
		retry = time.Duration(v.wait)
	case p.shaping:
		delay = time.Duration(v.wait)
	}
	return limit.Decision{Allowed: v.allowed, Remaining: p.remaining(v.debt), ResetAt: now + v.debt, RetryAfter: retry, Delay: delay}
}

// rescale converts tat, built under rule old, to rule p at now. A token
// bucket keeps the fraction of its capacity in use; a leaky bucket keeps
// the number of hits in its queue, which then drain at the new rate.
func rescale(tat, now int64, old, p rate) int64 {
	if tat <= now {
		return tat // full under any rule
	}
	debt := wide.MulDivCeil(tat-now, p.tau(), old.tau())
	if p.shaping && debt != math.MaxInt64 {
		debt = wide.MulDivCeil(debt, old.capacity, p.capacity)
	}
	// A saturated product stands for a debt beyond any cap.
	return now + min(debt, p.maxDebt())
}

// idleWord reports whether a key whose word is tat has been indistinguishable
// from a fresh key since idleSlack before now.
func idleWord(tat, now int64) bool { return tat != pending && tat <= now-idleSlack }
