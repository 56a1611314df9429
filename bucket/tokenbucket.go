package bucket

import (
	"github.com/shardlimiter/shardlimiter/limit"
	"github.com/shardlimiter/shardlimiter/table"
)

// TokenBucket is the TOKEN_BUCKET limiter: GCRA on one int64 per key,
// updated lock-free, and the Guava-style warm-up for rules with a Warmup
// (under the key's mutex). A key keeps one state across both: turning the
// warm-up on or off for a key rescales it like any other rule change.
//
// All methods are safe for concurrent use.
type TokenBucket struct {
	keyTable
}

var _ limit.Limiter = (*TokenBucket)(nil)

// NewTokenBucket returns an empty TOKEN_BUCKET table sized by cfg.
func NewTokenBucket(cfg table.Config) *TokenBucket {
	return &TokenBucket{newKeyTable(cfg, false)}
}

// Take applies hits to key under r at now (Unix ns). r must be valid and
// of algorithm TOKEN_BUCKET. Capacity is r.Capacity(); hits beyond it get
// RetryAfter limit.Never. See the package doc for the meaning of each field
// of the decision, with and without warm-up.
func (tb *TokenBucket) Take(key string, now int64, r limit.Rule, hits int64) limit.Decision {
	now = clampNow(now)
	if r.Warmup > 0 {
		w := newWarmRate(r)
		return w.decision(now, tb.takeWarm(key, now, w, hits, r.Behavior))
	}
	p := tokenRate(r)
	return p.decision(now, tb.take(key, now, p, hits, r.Behavior))
}

// Sweep retires up to about budget keys that are idle at now: full (and,
// under warm-up, fully cold) since at least one second before now. It
// returns how many it removed.
func (tb *TokenBucket) Sweep(now int64, budget int) int { return tb.keyTable.Sweep(now, budget) }

func tokenRate(r limit.Rule) rate {
	return rate{limit: r.Limit, period: int64(r.Period), capacity: r.Capacity()}
}

// Credit gives back hits taken from key under r (the unused part of a
// lease, see peer/lease.go) at now: the theoretical arrival time moves
// back by their cost, never below now, so a credit never fills the bucket
// past its capacity. It returns the hits given back, rounded down: 0 when
// the key is not held, is full, runs under another rule or with a
// warm-up, or its rule is being changed. A credit refused keeps the hits
// spent: under-admission, never more.
func (tb *TokenBucket) Credit(key string, now int64, r limit.Rule, hits int64) int64 {
	if hits <= 0 || r.Warmup > 0 {
		return 0
	}
	now = clampNow(now)
	p := tokenRate(r)
	id := p.id()
	e := tb.t.Lookup(key, now, false)
	for {
		w := e.Word.Load()
		if w == table.Dead || w == pending || w <= now || e.State.id.Load() != id || e.State.period.Load() != p.period {
			return 0
		}
		nw := max(w-p.cost(min(hits, p.capacity)), now)
		if e.Word.CompareAndSwap(w, nw) {
			if tb.track {
				tb.t.MarkChanged(key, e)
			}
			return (w - nw) / p.interval()
		}
	}
}
