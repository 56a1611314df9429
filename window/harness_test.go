package window

import (
	"testing"
	"time"

	"github.com/shardlimiter/shardlimiter/limit"
	"github.com/shardlimiter/shardlimiter/table"
)

// impl is one table under test: an optimized table or its reference.
type impl struct {
	name string
	new  func() limit.Limiter
}

var (
	testCfg    = table.Config{MaxKeys: 1 << 12}
	trackedCfg = table.Config{MaxKeys: 1 << 12, TrackChanges: true}
)

func fixedImpls() []impl {
	return []impl{
		{"optimized", func() limit.Limiter { return NewFixed(testCfg) }},
		{"tracked", func() limit.Limiter { return NewFixed(trackedCfg) }},
		{"reference", func() limit.Limiter { return newRefFixed() }},
	}
}

func slidingImpls() []impl {
	return []impl{
		{"optimized", func() limit.Limiter { return NewSliding(testCfg) }},
		{"tracked", func() limit.Limiter { return NewSliding(trackedCfg) }},
		{"reference", func() limit.Limiter { return newRefSliding() }},
	}
}

func logImpls() []impl {
	return []impl{
		{"optimized", func() limit.Limiter { return NewLog(testCfg) }},
		{"tracked", func() limit.Limiter { return NewLog(trackedCfg) }},
		{"reference", func() limit.Limiter { return newRefLog() }},
	}
}

// step is one take of a step table, at a named instant.
type step struct {
	at   string // the instant's name, for failure messages
	now  int64
	hits int64
	rule *limit.Rule // nil: the table's rule
	key  string      // "": "k"
	want limit.Decision
}

// runSteps runs steps in order against a fresh table of every impl.
func runSteps(t *testing.T, impls []impl, r limit.Rule, steps []step) {
	t.Helper()
	for _, im := range impls {
		l := im.new()
		for i, s := range steps {
			rule, key := r, s.key
			if s.rule != nil {
				rule = *s.rule
			}
			if key == "" {
				key = "k"
			}
			if got := l.Take(key, s.now, rule, s.hits); got != s.want {
				t.Fatalf("%s: step %d: Take(%q, %s, %d) = %+v, want %+v", im.name, i, key, s.at, s.hits, got, s.want)
			}
		}
	}
}

// ok is an admitted decision.
func ok(remaining, resetAt int64) limit.Decision {
	return limit.Decision{Allowed: true, Remaining: remaining, ResetAt: resetAt}
}

// no is a rejected decision.
func no(remaining, resetAt int64, retryAfter time.Duration) limit.Decision {
	return limit.Decision{Remaining: remaining, ResetAt: resetAt, RetryAfter: retryAfter}
}

// with returns r changed by f.
func with(r limit.Rule, f func(*limit.Rule)) *limit.Rule {
	f(&r)
	return &r
}

// alignedStart returns a realistic instant (November 2023) aligned to p.
func alignedStart(p time.Duration) int64 {
	const nov2023 = int64(1_700_000_000) * int64(time.Second)
	return nov2023 - nov2023%int64(p) + int64(p)
}
