package limit

import (
	"errors"
	"fmt"
	"time"
)

// The gubernator algorithms (GubernatorTokenBucket, GubernatorLeakyBucket)
// answer gubernator's pb.gubernator.V1 API with its semantics (package
// gubernator implements them). Their rules differ from shardlimiter's own:
//
//   - Limit and Period may be 0 (gubernator answers them; see package
//     gubernator), Limit, Burst and hits are bounded by MaxGubernatorCount,
//     and hits may be negative (a refund).
//   - Period is whole milliseconds. With Behavior Gregorian it is not a
//     span but gubernator's calendar unit in milliseconds: 0 minutes,
//     1 hours, 2 days, 3 weeks (refused, as gubernator does), 4 months,
//     5 years.
//   - Behavior may hold Reset (gubernator's RESET_REMAINING),
//     DrainOverLimit and Gregorian; CreatedAt is gubernator's created_at.
//
// Their numbers are internal: shardlimiter's own API refuses them, nodes
// forward them to each other.

// MaxGubernatorCount bounds the limit, burst and hits of a gubernator
// check: counts stay exact in the float64 balance of a leaky bucket and
// far from int64 overflow.
const MaxGubernatorCount = 1 << 53

// MaxGubernatorDuration bounds the duration of a gubernator check: longer
// than shardlimiter's MaxPeriod, since gubernator callers use periods of
// years (its own tests: 1000 minutes × 1000).
const MaxGubernatorDuration = 100 * 366 * 24 * time.Hour

// MaxCreatedAt bounds CreatedAt (Unix ms; 2100-01-01 UTC): an instant that
// converts to Unix nanoseconds without overflow.
const MaxCreatedAt = 4_102_444_800_000

// The units of a Gregorian period, gubernator's values.
const (
	GregorianMinutes = 0
	GregorianHours   = 1
	GregorianDays    = 2
	GregorianWeeks   = 3
	GregorianMonths  = 4
	GregorianYears   = 5
)

// ErrGregorianWeeks and ErrGregorianUnit are gubernator's errors for a
// Gregorian duration it cannot apply (its texts).
var (
	ErrGregorianWeeks = errors.New("`Duration = GregorianWeeks` not yet supported; consider making a PR!`")
	ErrGregorianUnit  = errors.New("behavior DURATION_IS_GREGORIAN is set; but `Duration` is not a valid gregorian interval")
)

// Gubernator reports whether a is one of the gubernator algorithms.
func (a Algorithm) Gubernator() bool {
	return a == GubernatorTokenBucket || a == GubernatorLeakyBucket
}

// GubernatorAlgorithms lists the gubernator algorithms.
func GubernatorAlgorithms() []Algorithm {
	return []Algorithm{GubernatorTokenBucket, GubernatorLeakyBucket}
}

const gubernatorBehaviors = Reset | DrainOverLimit | Gregorian

func (r Rule) validateGubernator() error {
	switch {
	case r.Limit < 0 || r.Limit > MaxGubernatorCount:
		return fmt.Errorf("limit must be in [0, %d], got %d", int64(MaxGubernatorCount), r.Limit)
	case r.Burst < 0 || r.Burst > MaxGubernatorCount:
		return fmt.Errorf("burst must be in [0, %d], got %d", int64(MaxGubernatorCount), r.Burst)
	case r.Period < 0 || r.Period > MaxGubernatorDuration:
		return fmt.Errorf("duration must be in [0, %d], got %d", MaxGubernatorDuration.Milliseconds(), r.Period.Milliseconds())
	case r.Period%time.Millisecond != 0:
		return fmt.Errorf("duration must be whole milliseconds, got %v", r.Period)
	case r.Behavior&^gubernatorBehaviors != 0:
		return fmt.Errorf("unknown behavior flags %#x", uint32(r.Behavior&^gubernatorBehaviors))
	case r.CreatedAt < 0 || r.CreatedAt > MaxCreatedAt:
		return fmt.Errorf("created_at must be in [0, %d], got %d", int64(MaxCreatedAt), r.CreatedAt)
	case r.MinInterval != 0 || r.Warmup != 0 || r.Calendar != NoCalendar:
		return fmt.Errorf("min_interval, warmup and calendar do not apply to %v", r.Algorithm)
	}
	if r.Behavior.Has(Gregorian) {
		switch r.Period.Milliseconds() {
		case GregorianMinutes, GregorianHours, GregorianDays, GregorianMonths, GregorianYears:
		case GregorianWeeks:
			return ErrGregorianWeeks
		default:
			return ErrGregorianUnit
		}
	}
	return nil
}

func (c Check) validateGubernatorHits() error {
	if c.Hits < -MaxGubernatorCount || c.Hits > MaxGubernatorCount {
		return fmt.Errorf("hits must be in [-%d, %d], got %d", int64(MaxGubernatorCount), int64(MaxGubernatorCount), c.Hits)
	}
	return c.Rule.Validate()
}
