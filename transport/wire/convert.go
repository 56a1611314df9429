package wire

import (
	"fmt"
	"math"
	"time"

	"github.com/shardlimiter/shardlimiter/limit"
)

// Conversion between one item as it is on the wire and the limit
// vocabulary.
//
// The wire carries durations as int64 milliseconds; limit holds
// time.Duration nanoseconds. A millisecond count beyond limit.MaxPeriod (or
// negative, or a zero period) would wrap or be meaningless after the
// multiplication, so Request.Check refuses it with a message naming the
// field. Everything else (limits, hits, names, keys) is carried over as is
// and validated by the node with limit.Check.Validate: conversion only
// guarantees that the values are representable.
//
// On the way out durations are rounded up to whole milliseconds: the owner
// then applies a period no shorter than asked, and a client that waits
// retry_after_ms, or until reset_time_ms, is never early. On the way in
// milliseconds saturate instead of wrapping.

const (
	nsPerMs     = int64(time.Millisecond)
	maxPeriodMs = int64(limit.MaxPeriod / time.Millisecond)
)

// knownBehaviors are the Behavior flags of shardlimiter's own API;
// internalBehaviors adds those of the gubernator algorithms, which only
// nodes send each other.
const (
	knownBehaviors    = limit.Reset | limit.CountRejected | limit.Overdraft
	internalBehaviors = knownBehaviors | limit.DrainOverLimit | limit.Gregorian
)

// UnknownAlgorithm is the Failed.Algorithm of an item whose algorithm is
// none of limit's.
const UnknownAlgorithm limit.Algorithm = math.MaxUint8

// Request is one RateLimitRequest with its fields as they are on the wire.
// Algorithm and Behavior are the enum numbers, which are limit's.
type Request struct {
	Name, Key     string // name, unique_key
	Hits, Limit   int64
	DurationMs    int64
	Algorithm     int32
	Burst         int64
	MinIntervalMs int64
	WarmupMs      int64
	Behavior      int32
	Chained       bool
	Calendar      int32
	CreatedAtMs   int64 // gubernator's created_at: between nodes only
}

// RequestOf is the request a client sends for c.
func RequestOf(c *limit.Check) Request {
	return Request{
		Name: c.Name, Key: c.Key, Hits: c.Hits, Limit: c.Rule.Limit,
		DurationMs: ceilMs(int64(c.Rule.Period)),
		Algorithm:  int32(c.Rule.Algorithm),
		Burst:      c.Rule.Burst, MinIntervalMs: ceilMs(int64(c.Rule.MinInterval)),
		WarmupMs:    ceilMs(int64(c.Rule.Warmup)),
		Behavior:    int32(c.Rule.Behavior),
		Chained:     c.Chained,
		Calendar:    int32(c.Rule.Calendar),
		CreatedAtMs: c.Rule.CreatedAt,
	}
}

// Check is the check a server decides for r. The error is meant for the
// caller of the API: it names the field at fault. An item with limit and
// duration_ms both 0 names a rule of the server's rules file by its name:
// it converts to a check with a zero Rule, which the server fills in (or
// the node refuses: limit must be > 0).
func (r *Request) Check() (limit.Check, error) { return r.check(false) }

// check is Check; internal accepts what only nodes send each other (see
// Checks.Internal): the gubernator algorithms and Cell, whose duration may be 0,
// their behavior flags, and created_at_ms.
func (r *Request) check(internal bool) (limit.Check, error) {
	if r.algorithmOf(internal) == UnknownAlgorithm {
		return limit.Check{}, fmt.Errorf("unknown algorithm %d", r.Algorithm)
	}
	known := knownBehaviors
	if internal {
		known = internalBehaviors
	}
	if r.Behavior < 0 || limit.Behavior(r.Behavior)&^known != 0 {
		return limit.Check{}, fmt.Errorf("unknown behavior flags %#x", uint32(r.Behavior)&^uint32(known))
	}
	if r.CreatedAtMs != 0 && !internal {
		return limit.Check{}, fmt.Errorf("created_at_ms is not a field of this API")
	}
	minPeriod := int64(1)
	if a := limit.Algorithm(r.Algorithm); a.Gubernator() || a == limit.Cell {
		top := limit.MaxGubernatorDuration
		if a == limit.Cell {
			top = limit.MaxCellPeriod
		}
		if r.DurationMs < 0 || r.DurationMs > top.Milliseconds() {
			return limit.Check{}, fmt.Errorf("duration_ms must be in [0, %d], got %d", top.Milliseconds(), r.DurationMs)
		}
		minPeriod = 0
	}
	if r.Calendar < 0 || r.Calendar > math.MaxUint8 {
		return limit.Check{}, fmt.Errorf("unknown calendar %d", r.Calendar)
	}
	var period time.Duration
	if r.Limit != 0 || r.DurationMs != 0 {
		var err error
		if minPeriod == 0 {
			period = time.Duration(r.DurationMs) * time.Millisecond
		} else if period, err = msToDuration("duration_ms", r.DurationMs, minPeriod); err != nil {
			return limit.Check{}, err
		}
	}
	minInterval, err := msToDuration("min_interval_ms", r.MinIntervalMs, 0)
	if err != nil {
		return limit.Check{}, err
	}
	warmup, err := msToDuration("warmup_ms", r.WarmupMs, 0)
	if err != nil {
		return limit.Check{}, err
	}
	return limit.Check{
		Name:    r.Name,
		Key:     r.Key,
		Hits:    r.Hits,
		Chained: r.Chained,
		Rule: limit.Rule{
			Algorithm:   limit.Algorithm(r.Algorithm),
			Limit:       r.Limit,
			Period:      period,
			Burst:       r.Burst,
			MinInterval: minInterval,
			Warmup:      warmup,
			Behavior:    limit.Behavior(r.Behavior),
			Calendar:    limit.Calendar(r.Calendar),
			CreatedAt:   r.CreatedAtMs,
		},
	}, nil
}

// algorithmOf is r's algorithm, or UnknownAlgorithm; internal accepts the
// gubernator algorithms.
func (r *Request) algorithmOf(internal bool) limit.Algorithm {
	top := int32(limit.SlidingLog)
	if internal {
		top = int32(limit.MaxAlgorithm)
	}
	if r.Algorithm < 0 || r.Algorithm > top {
		return UnknownAlgorithm
	}
	return limit.Algorithm(r.Algorithm)
}

// msToDuration converts a wire millisecond count in [min, limit.MaxPeriod].
func msToDuration(field string, ms, min int64) (time.Duration, error) {
	if ms < min {
		if min == 1 {
			return 0, fmt.Errorf("%s must be > 0, got %d", field, ms)
		}
		return 0, fmt.Errorf("%s must be >= %d, got %d", field, min, ms)
	}
	if ms > maxPeriodMs {
		return 0, fmt.Errorf("%s must be <= %d, got %d", field, maxPeriodMs, ms)
	}
	return time.Duration(ms) * time.Millisecond, nil
}

// RateLimitResponse.status.
const (
	statusUnderLimit int32 = 0
	statusOverLimit  int32 = 1
)

// Response is one RateLimitResponse with its fields as they are on the
// wire. Status is the enum number (0 UNDER_LIMIT, 1 OVER_LIMIT). Owner and
// Reason are the metadata entries: Owner "" and Reason limit.OK when absent.
type Response struct {
	Status                             int32
	Limit, Remaining                   int64
	ResetTimeMs, RetryAfterMs, DelayMs int64
	Error                              string
	Owner                              string
	Reason                             limit.Reason
}

// ResponseOf is the answer a server sends for r; lim is the limit of the
// check's rule, echoed. An answer decided by omitOwner does not name it:
// the Peers response names its owner once for all items. A failed item
// always names its reason (limit.Internal if r has none) and its owner, if
// any.
func ResponseOf(r *limit.Result, lim int64, omitOwner string) Response {
	out := Response{
		Status:       statusOverLimit,
		Limit:        lim,
		Remaining:    r.Remaining,
		ResetTimeMs:  ceilMs(r.ResetAt),
		RetryAfterMs: retryMs(r.RetryAfter),
		DelayMs:      max(ceilMs(int64(r.Delay)), 0),
		Error:        r.Error,
	}
	if r.Allowed {
		out.Status = statusUnderLimit
	}
	switch {
	case r.Error != "":
		out.Owner, out.Reason = r.Owner, r.Reason
		if out.Reason == limit.OK {
			out.Reason = limit.Internal
		}
	case r.Owner != omitOwner:
		out.Owner = r.Owner
	}
	return out
}

// Result is the Result a client reads from r. owner is the Owner of a
// decided item that names none (the Peers response's owner); a failed item
// names its own.
func (r *Response) Result(owner string) limit.Result {
	res := limit.Result{
		Decision: limit.Decision{
			Allowed:    r.Status == statusUnderLimit && r.Error == "",
			Remaining:  r.Remaining,
			ResetAt:    limit.MillisToNanos(r.ResetTimeMs),
			RetryAfter: limit.Never,
			Delay:      time.Duration(limit.MillisToNanos(max(r.DelayMs, 0))),
		},
		Error: r.Error,
		Owner: r.Owner,
	}
	if res.Owner == "" && res.Error == "" {
		res.Owner = owner
	}
	if r.RetryAfterMs >= 0 {
		res.RetryAfter = time.Duration(limit.MillisToNanos(r.RetryAfterMs))
	}
	if res.Error != "" {
		res.Reason = r.Reason
		if res.Reason == limit.OK {
			res.Reason = limit.Internal
		}
	}
	return res
}

// parseReason is the inverse of limit.Reason.String for failed items; an
// unknown name, or "ok", is Internal.
func parseReason(b []byte) limit.Reason {
	for _, r := range limit.Reasons() {
		if r != limit.OK && r.String() == string(b) {
			return r
		}
	}
	return limit.Internal
}

// ceilMs converts nanoseconds to milliseconds, rounding toward +∞.
func ceilMs(ns int64) int64 {
	q := ns / nsPerMs
	if ns%nsPerMs > 0 {
		q++
	}
	return q
}

// retryMs is retry_after_ms: -1 for limit.Never, else ceilMs, never negative.
func retryMs(d time.Duration) int64 {
	if d == limit.Never {
		return -1
	}
	return max(ceilMs(int64(d)), 0)
}
