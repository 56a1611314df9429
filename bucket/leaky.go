package bucket

import (
	"github.com/shardlimiter/shardlimiter/limit"
	"github.com/shardlimiter/shardlimiter/table"
)

// LeakyBucket is the LEAKY_BUCKET limiter, used for shaping: hits leave at
// a constant Limit per Period, and a check is admitted with the Delay the
// caller must wait before acting while the queue (depth Burst) has room.
// Its state is one int64 per key, the time the queue will be empty (the
// next free slot), updated lock-free.
//
// It shares the token bucket's arithmetic: a queue of depth Burst plus the
// slot being served is a GCRA bucket of capacity Burst+1 whose admitted
// calls are told to wait for the hits ahead of them. Burst 0 is strict
// spacing: a call is admitted only when the slot is free now, with Delay 0.
//
// All methods are safe for concurrent use.
type LeakyBucket struct {
	keyTable
}

var _ limit.Limiter = (*LeakyBucket)(nil)

// NewLeakyBucket returns an empty LEAKY_BUCKET table sized by cfg.
func NewLeakyBucket(cfg table.Config) *LeakyBucket {
	return &LeakyBucket{newKeyTable(cfg, true)}
}

// Take applies hits to key under r at now (Unix ns). r must be valid and of
// algorithm LEAKY_BUCKET. Capacity is r.Burst+1 (the queue and the slot in
// service); hits beyond it get RetryAfter limit.Never. Remaining is the room
// left counting the slot in service: how many hits one call could be
// admitted with now.
func (lb *LeakyBucket) Take(key string, now int64, r limit.Rule, hits int64) limit.Decision {
	now = clampNow(now)
	p := leakyRate(r)
	return p.decision(now, lb.take(key, now, p, hits, r.Behavior))
}

// Sweep retires up to about budget keys that are idle at now: queue empty
// since at least one second before now. It returns how many it removed.
func (lb *LeakyBucket) Sweep(now int64, budget int) int { return lb.keyTable.Sweep(now, budget) }

func leakyRate(r limit.Rule) rate {
	return rate{limit: r.Limit, period: int64(r.Period), capacity: r.Burst + 1, shaping: true}
}
