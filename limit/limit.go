// Package limit defines the vocabulary every part of shardlimiter shares: a
// rule (which algorithm, how many hits per period), a check (may this key
// spend N hits under this rule?) and its decision.
//
// It is a leaf package: plain values and their validation, no clock, no
// goroutines, no I/O. Time is always passed in as Unix nanoseconds (int64)
// so that decisions are deterministic and cheap to compute.
package limit

import (
	"fmt"
	"math"
	"time"
)

// Algorithm selects how a key's hits are counted. The numeric values are the
// wire values of the protobuf enum and must not change.
type Algorithm uint8

const (
	TokenBucket   Algorithm = 0 // GCRA token bucket, optional warm-up
	LeakyBucket   Algorithm = 1 // shaping: constant outflow, queue of depth Burst
	FixedWindow   Algorithm = 2 // windows aligned to multiples of Period since the epoch
	SlidingWindow Algorithm = 3 // weighted previous + current window counter
	SlidingLog    Algorithm = 4 // exact log of admitted hits, optional MinInterval
	// The algorithms of gubernator's API (see gubernator.go): internal
	// values, never on shardlimiter's own client API, only between nodes.
	GubernatorTokenBucket Algorithm = 5 // gubernator's TOKEN_BUCKET: a window from the first hit
	GubernatorLeakyBucket Algorithm = 6 // gubernator's LEAKY_BUCKET: a balance leaking whole hits
	// redis-cell's GCRA (see cell.go): internal too, for the Redis protocol.
	Cell Algorithm = 7 // redis-cell's CL.THROTTLE: GCRA with its own rounding
)

const (
	numAlgorithms = 8
	// MaxAlgorithm is the largest number nodes send each other.
	MaxAlgorithm = Cell
)

var algorithmNames = [numAlgorithms]string{"TOKEN_BUCKET", "LEAKY_BUCKET", "FIXED_WINDOW", "SLIDING_WINDOW", "SLIDING_LOG",
	"GUBERNATOR_TOKEN_BUCKET", "GUBERNATOR_LEAKY_BUCKET", "CELL"}

// String returns the wire name, e.g. "TOKEN_BUCKET".
func (a Algorithm) String() string {
	if a < numAlgorithms {
		return algorithmNames[a]
	}
	return fmt.Sprintf("ALGORITHM(%d)", uint8(a))
}

// Algorithms lists every algorithm of shardlimiter's own API in wire order
// (not the gubernator ones: see GubernatorAlgorithms).
func Algorithms() []Algorithm {
	return []Algorithm{TokenBucket, LeakyBucket, FixedWindow, SlidingWindow, SlidingLog}
}

// Behavior is a set of flags that change how one check is applied.
type Behavior uint32

const (
	// Reset forgets the key's state before the check is applied.
	Reset Behavior = 1 << 0
	// CountRejected makes rejected hits consume capacity too (the rolling-log
	// semantics of the seed articles: a client that keeps hammering stays out).
	CountRejected Behavior = 1 << 1
	// Overdraft counts every hit, admitted or not, and lets the count pass
	// Limit, as envoyproxy/ratelimit's counters do and token quotas need:
	// a usage report is counted in full, and the checks after it are
	// refused until the count is back under Limit. Hits are admitted when
	// they fit, as always; a peek (0 hits) is refused only when the key is
	// already over Limit, not when one more hit would not fit. How far past
	// Limit a count may go is each algorithm's bound: Limit + MaxHits for
	// the windows, one Period beyond the capacity for the buckets, and the
	// newest Limit+1 hits for SLIDING_LOG (which decides exactly with them).
	Overdraft Behavior = 1 << 2

	// DrainOverLimit and Gregorian are gubernator's DRAIN_OVER_LIMIT and
	// DURATION_IS_GREGORIAN, for the gubernator algorithms only (see
	// gubernator.go); its RESET_REMAINING is Reset.
	DrainOverLimit Behavior = 1 << 3
	Gregorian      Behavior = 1 << 4

	// ownBehaviors are the flags of shardlimiter's own algorithms.
	ownBehaviors = Reset | CountRejected | Overdraft
)

// Has reports whether every flag of f is set in b.
func (b Behavior) Has(f Behavior) bool { return b&f == f }

// Rule is the limit a check is measured against. Durations are
// time.Duration (integer nanoseconds).
type Rule struct {
	Algorithm Algorithm
	// Limit is the number of hits allowed per Period. For the buckets it is
	// also the capacity unless Burst is set.
	Limit int64
	// Period is the span Limit applies to.
	Period time.Duration
	// Burst is the token-bucket capacity or the leaky-bucket queue depth;
	// 0 means the algorithm's default (Limit for TOKEN_BUCKET, strict
	// spacing for LEAKY_BUCKET). Other algorithms reject a non-zero Burst.
	Burst int64
	// MinInterval is the minimum gap between two admitted hits (SLIDING_LOG only).
	MinInterval time.Duration
	// Warmup is the warm-up period after idleness (TOKEN_BUCKET only).
	Warmup time.Duration
	// Behavior holds per-check flags.
	Behavior Behavior
	// Calendar, when set, makes a FIXED_WINDOW rule's windows calendar
	// weeks, months or years in UTC; Period must then be Calendar.Period().
	Calendar Calendar
	// CreatedAt is gubernator's created_at, Unix milliseconds, for the
	// gubernator algorithms only; 0 means the deciding node's now.
	CreatedAt int64
	// NoLease keeps the checks under the rule decided by their key's
	// owner, never from a lease (a rules file's lease: false). Only the
	// node a check enters reads it: it is not sent to peers.
	NoLease bool
}

// Bounds on rules. They keep every computation inside int64 nanoseconds and
// every key's memory bounded.
const (
	MaxLimit  = 1_000_000_000
	MaxPeriod = 366 * 24 * time.Hour
	// MaxLogEntries bounds the entries of one SLIDING_LOG key's log. An
	// entry is one admitted action, its instant and its hit count (16
	// bytes), so a key's log holds at most 1 MiB however many hits each
	// action carries.
	MaxLogEntries = 1 << 16
	// MaxLogLimit bounds SLIDING_LOG's Limit, and so the hits a log counts.
	// Limit actions of one hit each make Limit entries: the limit may not
	// exceed MaxLogEntries.
	MaxLogLimit = MaxLogEntries
	// MaxCapacityTime bounds how long an empty bucket takes to refill
	// (Period × Burst / Limit).
	MaxCapacityTime = 10 * 366 * 24 * time.Hour
)

// Capacity returns the bucket capacity: Burst when set, else Limit.
func (r Rule) Capacity() int64 {
	if r.Burst > 0 {
		return r.Burst
	}
	return r.Limit
}

// Validate reports the first problem with the rule, or nil. A valid rule can
// be evaluated by every package without overflow.
func (r Rule) Validate() error {
	if r.Algorithm.Gubernator() {
		return r.validateGubernator()
	}
	if r.Algorithm == Cell {
		return r.validateCell()
	}
	switch {
	case r.Algorithm >= numAlgorithms:
		return fmt.Errorf("unknown algorithm %d", r.Algorithm)
	case r.Limit <= 0:
		return fmt.Errorf("limit must be > 0, got %d", r.Limit)
	case r.Limit > MaxLimit:
		return fmt.Errorf("limit must be <= %d, got %d", MaxLimit, r.Limit)
	case r.Period <= 0:
		return fmt.Errorf("duration_ms must be > 0, got %d", r.Period.Milliseconds())
	case r.Period > MaxPeriod:
		return fmt.Errorf("duration_ms must be <= %d, got %d", MaxPeriod.Milliseconds(), r.Period.Milliseconds())
	case r.Burst < 0:
		return fmt.Errorf("burst must be >= 0, got %d", r.Burst)
	case r.Burst > MaxLimit:
		return fmt.Errorf("burst must be <= %d, got %d", MaxLimit, r.Burst)
	case r.MinInterval < 0:
		return fmt.Errorf("min_interval_ms must be >= 0, got %d", r.MinInterval.Milliseconds())
	case r.Warmup < 0:
		return fmt.Errorf("warmup_ms must be >= 0, got %d", r.Warmup.Milliseconds())
	case r.Behavior&^ownBehaviors != 0:
		return fmt.Errorf("unknown behavior flags %#x", uint32(r.Behavior&^ownBehaviors))
	case r.CreatedAt != 0:
		return fmt.Errorf("created_at applies to the gubernator algorithms only, not %v", r.Algorithm)
	}
	if err := r.validateOptions(); err != nil {
		return err
	}
	if err := r.validateCalendar(); err != nil {
		return err
	}
	// The refill time of a full bucket must fit comfortably in int64 ns.
	if float64(r.Period)*float64(r.Capacity())/float64(r.Limit) > float64(MaxCapacityTime) {
		return fmt.Errorf("burst %d at limit %d per %v takes longer than %v to refill", r.Capacity(), r.Limit, r.Period, MaxCapacityTime)
	}
	return nil
}

// validateOptions rejects options that do not fit the algorithm.
func (r Rule) validateOptions() error {
	if r.Burst != 0 && r.Algorithm != TokenBucket && r.Algorithm != LeakyBucket {
		return fmt.Errorf("burst applies to TOKEN_BUCKET and LEAKY_BUCKET only, not %v", r.Algorithm)
	}
	if r.Warmup != 0 && r.Algorithm != TokenBucket {
		return fmt.Errorf("warmup_ms applies to TOKEN_BUCKET only, not %v", r.Algorithm)
	}
	if r.Warmup > MaxPeriod {
		return fmt.Errorf("warmup_ms must be <= %d, got %d", MaxPeriod.Milliseconds(), r.Warmup.Milliseconds())
	}
	if r.MinInterval != 0 && r.Algorithm != SlidingLog {
		return fmt.Errorf("min_interval_ms applies to SLIDING_LOG only, not %v", r.Algorithm)
	}
	if r.MinInterval > MaxPeriod {
		return fmt.Errorf("min_interval_ms must be <= %d, got %d", MaxPeriod.Milliseconds(), r.MinInterval.Milliseconds())
	}
	if r.Algorithm == SlidingLog && r.Behavior.Has(Overdraft) && r.Limit >= MaxLogLimit {
		return fmt.Errorf("SLIDING_LOG limit must be < %d with OVERDRAFT (the log keeps Limit+1 hits), got %d", MaxLogLimit, r.Limit)
	}
	if r.Algorithm == SlidingLog && r.Limit > MaxLogLimit {
		return fmt.Errorf("SLIDING_LOG limit must be <= %d (the log keeps one entry per admitted action); use SLIDING_WINDOW for larger limits, got %d", MaxLogLimit, r.Limit)
	}
	return nil
}

// Never is the RetryAfter of a check whose hits exceed the key's capacity:
// it can never be admitted, however long the caller waits.
const Never time.Duration = -1

// Decision is the answer to one check.
type Decision struct {
	// Allowed reports whether the hits were admitted (UNDER_LIMIT).
	Allowed bool
	// Remaining is what the key has left now, in [0, capacity].
	Remaining int64
	// ResetAt is when the key is back to full capacity, or its window ends
	// (Unix nanoseconds).
	ResetAt int64
	// RetryAfter is 0 when admitted; otherwise how long until the same hits
	// could be admitted, or Never.
	RetryAfter time.Duration
	// Delay is LEAKY_BUCKET's shaping delay: admitted, but act only after it.
	Delay time.Duration
}

// Limiter is a concurrent table of per-key state for one algorithm. The
// node holds one per algorithm and dispatches each check by its rule.
// Every method is safe for concurrent use with every other; none blocks
// on anything but the short per-key and per-shard locks of the table.
type Limiter interface {
	// Take applies hits to key under rule r at now (Unix ns) and returns the
	// decision. r must be valid (Rule.Validate) and of the limiter's
	// algorithm. Safe for concurrent use.
	Take(key string, now int64, r Rule, hits int64) Decision
	// Sweep removes up to about budget keys that are idle at now (their
	// state equals a fresh key's) and returns how many it removed.
	Sweep(now int64, budget int) int
	// Len returns how many keys are held.
	Len() int
	// Evicted returns how many keys were evicted to respect the key cap.
	Evicted() uint64
	// StateMover moves keys with their state between nodes.
	StateMover
}

// MillisToNanos converts a count of milliseconds (the wire's unit for
// instants and delays) to nanoseconds, saturating at the int64 range.
func MillisToNanos(ms int64) int64 {
	const ns = int64(time.Millisecond)
	switch {
	case ms > math.MaxInt64/ns:
		return math.MaxInt64
	case ms < math.MinInt64/ns:
		return math.MinInt64
	}
	return ms * ns
}
