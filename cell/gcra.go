package cell

import (
	"math"
	"time"

	"github.com/shardlimiter/shardlimiter/limit"
)

// Quota is one CL.THROTTLE's rule reduced to what the arithmetic needs.
type Quota struct {
	Interval  int64 // T, ns (redis-cell's emission interval), > 0
	Tolerance int64 // τ = T × (max_burst+1), ns
	Limit     int64 // max_burst + 1
}

// QuotaOf returns the quota of a valid Cell rule.
func QuotaOf(r limit.Rule) Quota {
	t := limit.CellInterval(r.Limit, r.Period)
	return Quota{Interval: t, Tolerance: t * (r.Burst + 1), Limit: r.Burst + 1}
}

// Reply is CL.THROTTLE's answer before its durations are rounded.
type Reply struct {
	Limited    bool
	Limit      int64
	Remaining  int64
	RetryAfter int64 // ns; -1 when allowed, or when the quantity can never fit
	ResetAfter int64 // ns
}

// Throttle applies quantity at now to a key whose tat is tat and returns
// the new tat and the reply. It is pure. A tat in the past counts as now,
// as the key would have expired in Redis.
func (q Quota) Throttle(tat, now, quantity int64) (int64, Reply) {
	base := max(tat, now)
	inc := q.Interval * quantity // bounded by limit.MaxCellTime
	r := Reply{Limit: q.Limit, RetryAfter: -1}
	var ttl int64
	newTat := base + inc
	if diff := now - (newTat - q.Tolerance); diff < 0 {
		if inc <= q.Tolerance {
			r.RetryAfter = -diff
		}
		r.Limited = true
		ttl = base - now
		newTat = tat
	} else {
		ttl = newTat - now
	}
	if next := q.Tolerance - ttl; next > -q.Interval {
		r.Remaining = microsQuotient(next/1000, q.Interval/1000)
	}
	r.ResetAfter = ttl
	return newTat, r
}

// microsQuotient is redis-cell's remaining: a quotient of whole
// microseconds in float64, converted to an integer as Rust's "as" does
// (toward zero, saturating, NaN to 0): an interval under a microsecond
// divides by zero there.
func microsQuotient(num, den int64) int64 {
	if den == 0 {
		switch {
		case num > 0:
			return math.MaxInt64
		case num < 0:
			return math.MinInt64
		}
		return 0
	}
	return int64(float64(num) / float64(den))
}

// Seconds rounds a duration of the reply as redis-cell does: whole seconds
// (the float64 seconds truncated), plus one when the millisecond part is
// not 0. -1 (allowed, or never) stays -1.
func Seconds(ns int64) int64 {
	if ns == -1 {
		return -1
	}
	d := time.Duration(ns)
	secs, frac := int64(d/time.Second), int64(d%time.Second)
	s := int64(float64(secs) + float64(frac)/1e9)
	if frac/int64(time.Millisecond) > 0 {
		s++
	}
	return s
}

// Decision dresses r, reached at now, as the node's limit.Decision: the
// durations travel rounded (whole seconds, exact in the wire's
// milliseconds) so that the node that answers the client replies what
// the owner computed. RetryAfter is limit.Never for a quantity that can
// never fit and 0 when allowed; Delay carries reset_after; ResetAt is
// now + reset_after, unrounded.
func (r Reply) Decision(now int64) limit.Decision {
	d := limit.Decision{Allowed: !r.Limited, Remaining: r.Remaining, ResetAt: now + r.ResetAfter,
		Delay: time.Duration(Seconds(r.ResetAfter)) * time.Second}
	switch {
	case !r.Limited:
	case r.RetryAfter == -1:
		d.RetryAfter = limit.Never
	default:
		d.RetryAfter = time.Duration(Seconds(r.RetryAfter)) * time.Second
	}
	return d
}
