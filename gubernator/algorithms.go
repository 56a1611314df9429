package gubernator

import (
	"math"

	"github.com/shardlimiter/shardlimiter/limit"
)

// Kind is the algorithm an Item was created by; 0 is a fresh key.
type Kind uint8

const (
	None  Kind = iota // no state: a fresh key
	Token             // TOKEN_BUCKET
	Leaky             // LEAKY_BUCKET
)

// Item is one key's state: gubernator's cache item and its token or leaky
// bucket value. Instants are Unix milliseconds.
type Item struct {
	Kind Kind
	// Over is the token bucket's stored status: set when a hit found the
	// window empty, it is reported by every later answer of the window, as
	// gubernator does.
	Over      bool
	Limit     int64
	Duration  int64   // ms, or the Gregorian unit, as last requested
	Burst     int64   // leaky bucket capacity
	Remaining int64   // token bucket: hits left in the window
	Level     float64 // leaky bucket: hits left, with the fraction leaked so far
	// Anchor is the token bucket's window start (created_at of its first
	// hit) or the leaky bucket's last credit of leaked hits.
	Anchor   int64
	ExpireAt int64 // the key is fresh again once now passes this
}

// Expired reports whether it is fresh at now (ms): no state, or past its
// expiry (gubernator's cache drops an item when ExpireAt < now).
func (it *Item) Expired(now int64) bool { return it.Kind == None || it.ExpireAt < now }

// Request is one check as the algorithms read it.
type Request struct {
	Algorithm limit.Algorithm // GubernatorTokenBucket or GubernatorLeakyBucket
	Hits      int64
	Limit     int64
	Duration  int64 // ms, or the Gregorian unit with limit.Gregorian
	Burst     int64
	Behavior  limit.Behavior
	CreatedAt int64 // ms; 0 means now
}

// Response is gubernator's RateLimitResp without its error and metadata.
type Response struct {
	Over      bool // OVER_LIMIT
	Limit     int64
	Remaining int64
	ResetTime int64 // Unix ms
}

// RequestOf is the Request of a valid gubernator check.
func RequestOf(c *limit.Check) Request {
	return Request{
		Algorithm: c.Rule.Algorithm, Hits: c.Hits, Limit: c.Rule.Limit,
		Duration: c.Rule.Period.Milliseconds(), Burst: c.Rule.Burst,
		Behavior: c.Rule.Behavior, CreatedAt: c.Rule.CreatedAt,
	}
}

// Take applies r to it at now (Unix ms) and returns the answer. r must be
// valid (limit.Check.Validate). It is a pure function of its arguments.
func Take(it *Item, now int64, r Request) Response {
	if r.CreatedAt == 0 {
		r.CreatedAt = now
	}
	if it.Kind != None && it.Expired(now) {
		*it = Item{}
	}
	if r.Algorithm == limit.GubernatorLeakyBucket {
		return takeLeaky(it, now, r)
	}
	return takeToken(it, now, r)
}

func takeToken(it *Item, now int64, r Request) Response {
	if it.Kind != None && r.Behavior.Has(limit.Reset) {
		// RESET_REMAINING forgets the key (of either algorithm) and answers
		// a full window without applying the hits.
		*it = Item{}
		return Response{Limit: r.Limit, Remaining: r.Limit}
	}
	if it.Kind != Token {
		return newToken(it, now, r)
	}
	if it.Limit != r.Limit { // a changed limit moves remaining by the difference
		it.Remaining = max(it.Remaining+r.Limit-it.Limit, 0)
		it.Limit = r.Limit
	}
	rl := Response{Over: it.Over, Limit: r.Limit, Remaining: it.Remaining, ResetTime: it.ExpireAt}
	if it.Duration != r.Duration {
		// A changed duration moves the window's end; a window that has
		// ended under it starts over at created_at. (The answer keeps the
		// remaining read before, as gubernator's does.)
		expire := it.Anchor + r.Duration
		if r.Behavior.Has(limit.Gregorian) {
			expire = gregorianEnd(now, r.Duration)
		}
		if expire <= r.CreatedAt {
			expire = r.CreatedAt + r.Duration
			it.Anchor, it.Remaining = r.CreatedAt, it.Limit
		}
		it.ExpireAt, it.Duration, rl.ResetTime = expire, r.Duration, expire
	}
	switch {
	case r.Hits == 0: // a report
	case rl.Remaining == 0 && r.Hits > 0:
		rl.Over, it.Over = true, true
	case it.Remaining == r.Hits:
		it.Remaining, rl.Remaining = 0, 0
	case r.Hits > it.Remaining:
		// More than is left: refused, and nothing consumed unless
		// DRAIN_OVER_LIMIT.
		rl.Over = true
		if r.Behavior.Has(limit.DrainOverLimit) {
			it.Remaining, rl.Remaining = 0, 0
		}
	default:
		it.Remaining -= r.Hits
		rl.Remaining = it.Remaining
	}
	return rl
}

func newToken(it *Item, now int64, r Request) Response {
	expire := r.CreatedAt + r.Duration
	if r.Behavior.Has(limit.Gregorian) {
		expire = gregorianEnd(now, r.Duration)
	}
	*it = Item{Kind: Token, Limit: r.Limit, Duration: r.Duration, Remaining: r.Limit - r.Hits,
		Anchor: r.CreatedAt, ExpireAt: expire}
	rl := Response{Limit: r.Limit, Remaining: it.Remaining, ResetTime: expire}
	if r.Hits > r.Limit {
		// More than the limit on a new key: refused, the window stays full.
		rl.Over, rl.Remaining, it.Remaining = true, r.Limit, r.Limit
	}
	return rl
}

func takeLeaky(it *Item, now int64, r Request) Response {
	if r.Burst == 0 {
		r.Burst = r.Limit
	}
	if it.Kind != Leaky {
		return newLeaky(it, now, r)
	}
	if r.Behavior.Has(limit.Reset) {
		it.Level = float64(r.Burst)
	}
	if it.Burst != r.Burst { // a larger burst than the balance fills the bucket
		if r.Burst > trunc(it.Level) {
			it.Level = float64(r.Burst)
		}
		it.Burst = r.Burst
	}
	it.Limit, it.Duration = r.Limit, r.Duration
	duration, rate := r.Duration, float64(r.Duration)/float64(r.Limit)
	if r.Behavior.Has(limit.Gregorian) {
		end := gregorianEnd(now, r.Duration)
		rate = float64(gregorianLength(now, r.Duration)) / float64(r.Limit)
		duration = end - now
	}
	if r.Hits != 0 {
		it.ExpireAt = r.CreatedAt + duration
	}
	// Leaked hits are credited only once at least one whole hit has
	// leaked; the credit then carries the fraction too.
	if leak := float64(r.CreatedAt-it.Anchor) / rate; trunc(leak) > 0 {
		it.Level += leak
		it.Anchor = r.CreatedAt
	}
	if trunc(it.Level) > it.Burst {
		it.Level = float64(it.Burst)
	}
	step := trunc(rate)
	rem := trunc(it.Level)
	rl := Response{Limit: it.Limit, Remaining: rem, ResetTime: r.CreatedAt + (it.Limit-rem)*step}
	switch {
	case rem == 0 && r.Hits > 0:
		rl.Over = true
	case rem == r.Hits:
		it.Level, rl.Remaining = 0, 0
		rl.ResetTime = r.CreatedAt + rl.Limit*step
	case r.Hits > rem:
		rl.Over = true
		if r.Behavior.Has(limit.DrainOverLimit) {
			it.Level, rl.Remaining = 0, 0
		}
	case r.Hits == 0:
	default:
		it.Level -= float64(r.Hits)
		rl.Remaining = trunc(it.Level)
		rl.ResetTime = r.CreatedAt + (rl.Limit-rl.Remaining)*step
	}
	return rl
}

func newLeaky(it *Item, now int64, r Request) Response {
	duration, rate := r.Duration, float64(r.Duration)/float64(r.Limit)
	if r.Behavior.Has(limit.Gregorian) {
		// The first period ends with the calendar unit; the rate stays
		// duration/limit, as gubernator's does for a new key.
		duration = gregorianEnd(now, r.Duration) - now
	}
	step := trunc(rate)
	*it = Item{Kind: Leaky, Level: float64(r.Burst - r.Hits), Limit: r.Limit, Duration: duration,
		Anchor: r.CreatedAt, Burst: r.Burst, ExpireAt: r.CreatedAt + duration}
	rl := Response{Limit: r.Limit, Remaining: r.Burst - r.Hits, ResetTime: r.CreatedAt + (r.Limit-(r.Burst-r.Hits))*step}
	if r.Hits > r.Burst { // more than the burst on a new key: refused, the key starts empty
		rl.Over, rl.Remaining, it.Level = true, 0, 0
		rl.ResetTime = r.CreatedAt + rl.Limit*step
	}
	return rl
}

// trunc converts f to int64 as gubernator's conversions do on amd64, its
// reference platform: toward zero, and math.MinInt64 for NaN, ±Inf and
// values out of range (limit 0 makes the rate +Inf, duration 0 makes it
// 0: a leak of NaN or +Inf then credits nothing).
func trunc(f float64) int64 {
	if math.IsNaN(f) || f >= math.MaxInt64 || f < math.MinInt64 {
		return math.MinInt64
	}
	return int64(f)
}
