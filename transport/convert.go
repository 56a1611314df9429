package transport

import (
	"fmt"
	"math"
	"time"

	"github.com/shardlimiter/shardlimiter/limit"
	"github.com/shardlimiter/shardlimiter/transport/pb"
)

// Conversion between the wire messages and the limit vocabulary.
//
// The wire carries durations as int64 milliseconds; limit holds
// time.Duration nanoseconds. A millisecond count beyond limit.MaxPeriod (or
// negative, or a zero period) would wrap or be meaningless after the
// multiplication, so checkFromProto refuses it with a message naming the
// field. Everything else (limits, hits, names, keys) is carried over as is and
// validated by the node with limit.Check.Validate: conversion only guarantees
// that the values are representable.
//
// On the way back durations are rounded up to whole milliseconds, so a
// client that waits retry_after_ms, or until reset_time_ms, is never early.

const (
	nsPerMs     = int64(time.Millisecond)
	maxPeriodMs = int64(limit.MaxPeriod / time.Millisecond)
)

// knownBehaviors are the Behavior flags this version understands.
const knownBehaviors = limit.Reset | limit.CountRejected

// checkFromProto converts one wire request. The error is meant for the
// caller of the API: it names the field at fault.
func checkFromProto(r *pb.RateLimitRequest) (limit.Check, error) {
	alg := r.GetAlgorithm()
	if alg < pb.Algorithm_TOKEN_BUCKET || alg > pb.Algorithm_SLIDING_LOG {
		return limit.Check{}, fmt.Errorf("unknown algorithm %d", int32(alg))
	}
	beh := r.GetBehavior()
	if beh < 0 || limit.Behavior(beh)&^knownBehaviors != 0 {
		return limit.Check{}, fmt.Errorf("unknown behavior flags %#x", uint32(beh)&^uint32(knownBehaviors))
	}
	period, err := msToDuration("duration_ms", r.GetDurationMs(), 1)
	if err != nil {
		return limit.Check{}, err
	}
	minInterval, err := msToDuration("min_interval_ms", r.GetMinIntervalMs(), 0)
	if err != nil {
		return limit.Check{}, err
	}
	warmup, err := msToDuration("warmup_ms", r.GetWarmupMs(), 0)
	if err != nil {
		return limit.Check{}, err
	}
	return limit.Check{
		Name: r.GetName(),
		Key:  r.GetUniqueKey(),
		Hits: r.GetHits(),
		Rule: limit.Rule{
			Algorithm:   limit.Algorithm(alg), // same numbering, see TestAlgorithmNumbering
			Limit:       r.GetLimit(),
			Period:      period,
			Burst:       r.GetBurst(),
			MinInterval: minInterval,
			Warmup:      warmup,
			Behavior:    limit.Behavior(beh),
		},
	}, nil
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

// checkToProto writes c into dst, overwriting every field. Sub-millisecond
// durations round up: the owner then applies a period or interval no shorter
// than asked.
func checkToProto(c *limit.Check, dst *pb.RateLimitRequest) {
	dst.Name = c.Name
	dst.UniqueKey = c.Key
	dst.Hits = c.Hits
	dst.Limit = c.Rule.Limit
	dst.DurationMs = ceilMs(int64(c.Rule.Period))
	dst.Algorithm = pb.Algorithm(c.Rule.Algorithm)
	dst.Burst = c.Rule.Burst
	dst.MinIntervalMs = ceilMs(int64(c.Rule.MinInterval))
	dst.WarmupMs = ceilMs(int64(c.Rule.Warmup))
	dst.Behavior = pb.Behavior(c.Rule.Behavior)
}

// Metadata keys of RateLimitResponse.
const (
	metaOwner  = "owner"  // the node that decided
	metaReason = "reason" // limit.Reason.String() of a failed item
)

// resultToProto writes r into dst, overwriting every field. lim is the
// rule's Limit, echoed to the client. meta supplies the metadata map; nil
// allocates one.
func resultToProto(r *limit.Result, lim int64, dst *pb.RateLimitResponse, meta *metaCache) {
	dst.Status = pb.Status_OVER_LIMIT
	if r.Allowed {
		dst.Status = pb.Status_UNDER_LIMIT
	}
	dst.Limit = lim
	dst.Remaining = r.Remaining
	dst.ResetTimeMs = ceilMs(r.ResetAt)
	dst.RetryAfterMs = retryMs(r.RetryAfter)
	dst.DelayMs = max(ceilMs(int64(r.Delay)), 0)
	dst.Error = r.Error
	if meta == nil {
		meta = new(metaCache)
	}
	dst.Metadata = meta.of(r)
}

// metaCache builds the metadata maps of one batch. Items decided without
// error by the same owner share one map: the maps are only read afterwards
// (by the encoder), and sharing saves a map per item. Failed items get their
// own map, which names the reason and, if any, the owner.
type metaCache struct {
	// omitOwner is left out of the maps: the Peers response names it once.
	omitOwner string
	owner     string
	shared    map[string]string
}

func (mc *metaCache) of(r *limit.Result) map[string]string {
	if r.Error != "" {
		reason := r.Reason
		if reason == limit.OK {
			reason = limit.Internal
		}
		m := map[string]string{metaReason: reason.String()}
		if r.Owner != "" {
			m[metaOwner] = r.Owner
		}
		return m
	}
	if r.Owner == "" || r.Owner == mc.omitOwner {
		return nil
	}
	if mc.shared == nil || mc.owner != r.Owner {
		mc.owner, mc.shared = r.Owner, map[string]string{metaOwner: r.Owner}
	}
	return mc.shared
}

// resultFromProto is the inverse of resultToProto, for the clients; owner
// is the Owner of a decided item whose metadata names none (failed items
// always carry theirs). Millisecond values saturate instead of wrapping.
func resultFromProto(r *pb.RateLimitResponse, owner string) limit.Result {
	res := limit.Result{
		Decision: limit.Decision{
			Allowed:    r.GetStatus() == pb.Status_UNDER_LIMIT && r.GetError() == "",
			Remaining:  r.GetRemaining(),
			ResetAt:    msToNs(r.GetResetTimeMs()),
			RetryAfter: limit.Never,
			Delay:      time.Duration(msToNs(max(r.GetDelayMs(), 0))),
		},
		Error: r.GetError(),
		Owner: r.GetMetadata()[metaOwner],
	}
	if res.Owner == "" && res.Error == "" {
		res.Owner = owner
	}
	if ms := r.GetRetryAfterMs(); ms >= 0 {
		res.RetryAfter = time.Duration(msToNs(ms))
	}
	if res.Error != "" {
		res.Reason = parseReason(r.GetMetadata()[metaReason])
	}
	return res
}

// parseReason is the inverse of limit.Reason.String for failed items;
// an unknown or missing name is Internal.
func parseReason(s string) limit.Reason {
	for _, r := range limit.Reasons() {
		if r != limit.OK && r.String() == s {
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

// msToNs converts milliseconds to nanoseconds, saturating at the int64 range.
func msToNs(ms int64) int64 {
	switch {
	case ms > math.MaxInt64/nsPerMs:
		return math.MaxInt64
	case ms < math.MinInt64/nsPerMs:
		return math.MinInt64
	}
	return ms * nsPerMs
}
