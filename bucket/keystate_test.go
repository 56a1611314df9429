package bucket

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/shardlimiter/shardlimiter/limit"
	"github.com/shardlimiter/shardlimiter/table"
)

func TestSweepRetiresOnlyIdleKeys(t *testing.T) {
	t.Parallel()
	perSecond := limit.Rule{Limit: 10, Period: sec}
	guava := limit.Rule{Limit: 10, Period: sec, Warmup: 2 * sec, Burst: 1}
	queue := limit.Rule{Algorithm: limit.LeakyBucket, Limit: 10, Period: sec, Burst: 2}
	for _, c := range []struct {
		name  string
		impls []impl
		rule  limit.Rule
		hits  int64
		idle  int64 // the first instant the key equals a fresh key
	}{
		{"token", tokenImpls, perSecond, 10, t0 + int64(sec)},
		// 290ms until full, then 100ms to cool the one permit it spent.
		{"warmup", tokenImpls, guava, 1, t0 + int64(390*ms)},
		{"leaky", leakyImpls, queue, 3, t0 + int64(300*ms)},
	} {
		for _, im := range c.impls {
			t.Run(c.name+"/"+im.name, func(t *testing.T) {
				t.Parallel()
				l := im.new()
				l.Take("account:42", t0, c.rule, c.hits)
				l.Take("account:43", t0, c.rule, 0) // a peek at an unknown key stores nothing
				at := c.idle + idleSlack
				if n := l.Sweep(at-1, 100); n != 0 || l.Len() != 1 {
					t.Fatalf("Sweep(idle+slack-1ns) removed %d, Len %d; want 0, 1", n, l.Len())
				}
				if n := l.Sweep(at, 100); n != 1 || l.Len() != 0 {
					t.Fatalf("Sweep(idle+slack) removed %d, Len %d; want 1, 0", n, l.Len())
				}
				// A retired key comes back fresh.
				if got, want := l.Take("account:42", at, c.rule, 0), l.Take("account:44", at, c.rule, 0); got != want {
					t.Fatalf("Take(%q, idle+slack, 0) = %+v, want a fresh key's %+v", "account:42", got, want)
				}
			})
		}
	}
}

// TestConcurrentRuleChanges has goroutines take on one key with rules that
// keep changing under each other (including warm-up on and off), so that
// rule adoption races lock-free takes, under -race. Every decision must
// keep the Decision contract, and the key must stay within a bound: each
// admission uses a fraction n/C of some rule's capacity and fractions
// refill at most 1/τ per second, so hits ≤ Cmax + span × Cmax/τmin.
func TestConcurrentRuleChanges(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name  string
		l     limit.Limiter
		rules []limit.Rule
		cmax  int64
		tmin  int64 // smallest τ, ns
	}{
		{"token", NewTokenBucket(table.Config{}), []limit.Rule{
			{Limit: 100, Period: sec, Burst: 20},
			{Limit: 50, Period: sec, Burst: 40},
			{Limit: 100, Period: sec, Burst: 20, Warmup: sec},
		}, 40, int64(200 * ms)},
		{"leaky", NewLeakyBucket(table.Config{}), []limit.Rule{
			{Algorithm: limit.LeakyBucket, Limit: 100, Period: sec, Burst: 19},
			{Algorithm: limit.LeakyBucket, Limit: 50, Period: sec, Burst: 39},
		}, 40, int64(200 * ms)},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			const workers, steps = 4, 2000
			var clock, admitted atomic.Int64
			clock.Store(t0)
			var wg sync.WaitGroup
			for w := range workers {
				wg.Go(func() {
					rng := rand.New(rand.NewPCG(uint64(w), 11))
					for i := range steps {
						now := clock.Add(int64(ms))
						r := c.rules[(i/7+w)%len(c.rules)]
						hits := rng.Int64N(4)
						d := c.l.Take("account:42", now, r, hits)
						checkDecision(t, i, r, fuzzCapacity(r), now, hits, d)
						if d.Allowed {
							admitted.Add(hits)
						}
					}
				})
			}
			wg.Wait()
			span := clock.Load() - t0
			if got, bound := admitted.Load(), c.cmax+span*c.cmax/c.tmin; got > bound {
				t.Fatalf("admitted %d hits, bound %d", got, bound)
			}
		})
	}
}

func TestIdentityPacksEveryValidRule(t *testing.T) {
	t.Parallel()
	for _, p := range []rate{
		{limit: 1, period: 1, capacity: 1},
		{limit: limit.MaxLimit, period: int64(limit.MaxPeriod), capacity: limit.MaxLimit + 1, shaping: true},
		{limit: 123_456_789, period: 42, capacity: 987_654_321},
	} {
		for _, mode := range []int64{0, warmMode} {
			if got := rateOf(p.id()|mode, p.period, p.shaping); got != p {
				t.Errorf("rateOf(id(%+v)|%#x) = %+v", p, mode, got)
			}
			if p.id()|mode == 0 {
				t.Errorf("id(%+v)|%#x is a fresh key's identity", p, mode)
			}
		}
	}
}

func TestKeyCapEvicts(t *testing.T) {
	t.Parallel()
	for _, l := range []limit.Limiter{NewTokenBucket(table.Config{MaxKeys: 10}), NewLeakyBucket(table.Config{MaxKeys: 10})} {
		r := limit.Rule{Algorithm: limit.LeakyBucket, Limit: 10, Period: sec}
		if _, ok := l.(*TokenBucket); ok {
			r.Algorithm = limit.TokenBucket
		}
		for i := range 25 {
			l.Take(fmt.Sprint("account:", i), t0+int64(i)*int64(sec), r, 1)
		}
		if l.Len() != 10 || l.Evicted() != 15 {
			t.Errorf("%T after 25 keys under a cap of 10: Len %d, Evicted %d; want 10, 15", l, l.Len(), l.Evicted())
		}
	}
}
