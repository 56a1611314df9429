package bucket

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shardlimiter/shardlimiter/internal/wide"
	"github.com/shardlimiter/shardlimiter/limit"
)

// conserved is a limiter, a rule, the capacity the bound uses, and the
// share of the bound a hammered key must reach for the test to mean
// something (warm-up spends part of the span cold).
type conserved struct {
	name     string
	impls    []impl
	rule     limit.Rule
	capacity int64
	minShare float64
}

var conservedCases = []conserved{
	{"token", tokenImpls, limit.Rule{Limit: 100, Period: sec, Burst: 20}, 20, 0.9},
	{"token fractional interval", tokenImpls, limit.Rule{Limit: 7, Period: sec, Burst: 3}, 3, 0.8},
	// Held to one hit per ns (see rate): ~1e9 + span admitted of a 4e9 bound.
	{"token sub-nanosecond interval", tokenImpls, limit.Rule{Limit: 1_000_000_000, Period: ms}, 1_000_000_000, 0.2},
	{"warmup", tokenImpls, limit.Rule{Limit: 100, Period: sec, Burst: 20, Warmup: 2 * sec}, 20, 0.5},
	{"leaky", leakyImpls, limit.Rule{Algorithm: limit.LeakyBucket, Limit: 100, Period: sec, Burst: 5}, 6, 0.9},
	{"leaky strict", leakyImpls, limit.Rule{Algorithm: limit.LeakyBucket, Limit: 100, Period: sec}, 1, 0.6}, // jitter wastes slots
}

// withinBound reports admitted ≤ capacity + span×limit/period, exactly.
func withinBound(admitted int64, c conserved, span int64) bool {
	return admitted <= c.capacity || wide.MulLE(admitted-c.capacity, int64(c.rule.Period), span, c.rule.Limit)
}

// TestConservationUnderConcurrency hammers one key from many goroutines
// and checks that it never admits more than capacity + span×Limit/Period.
// The goroutines share a simulated clock; each call's now is that clock
// minus up to 20ms, so the nows the table sees are out of order the way a
// node's batches are. Warm-up keys obey the same, stable, bound.
func TestConservationUnderConcurrency(t *testing.T) {
	t.Parallel()
	const workers, steps = 8, 600
	for _, c := range conservedCases {
		for _, im := range c.impls {
			t.Run(c.name+"/"+im.name, func(t *testing.T) {
				t.Parallel()
				l := im.new()
				// Demand is 4×Limit on average; the jitter 1/150 of the span.
				span, maxHits := int64(3*sec), int64(3)
				if c.capacity > 1000 {
					span, maxHits = int64(3*ms), c.capacity/100
				}
				tick, jitter := span/(workers*steps), span/150
				var clock, admitted atomic.Int64
				clock.Store(t0)
				var wg sync.WaitGroup
				for w := range workers {
					wg.Go(func() {
						rng := rand.New(rand.NewPCG(uint64(w), 7))
						for range steps {
							now := clock.Add(tick) - rng.Int64N(jitter)
							hits := 1 + rng.Int64N(maxHits)
							if d := l.Take("account:42", now, c.rule, hits); d.Allowed {
								admitted.Add(hits)
							}
						}
					})
				}
				wg.Wait()
				span = clock.Load() - t0 + jitter
				got := admitted.Load()
				bound := float64(c.capacity) + float64(span)*float64(c.rule.Limit)/float64(c.rule.Period)
				if !withinBound(got, c, span) {
					t.Fatalf("admitted %d hits in %v, over the bound %.0f", got, time.Duration(span), bound)
				}
				if float64(got) < c.minShare*bound {
					t.Fatalf("admitted %d hits in %v, under %.0f%% of the bound %.0f: the key was not hammered", got, time.Duration(span), 100*c.minShare, bound)
				}
			})
		}
	}
}

// TestConservationWithSweeps takes on a few keys that go idle in turn
// while the same goroutines sweep idle keys between their takes. The sweep
// runs a minute of simulated time behind the takers, as the node's sweep
// runs with a clock read no earlier than the takes it races. A retired key
// comes back full, which it was: the bound holds per key over the whole
// span.
func TestConservationWithSweeps(t *testing.T) {
	t.Parallel()
	const workers, steps, keys = 4, 3000, 4
	for _, c := range conservedCases {
		for _, im := range c.impls {
			t.Run(c.name+"/"+im.name, func(t *testing.T) {
				t.Parallel()
				l := im.new()
				var clock atomic.Int64
				clock.Store(t0)
				var admitted [keys]atomic.Int64
				var removed atomic.Int64
				var wg sync.WaitGroup
				for range workers {
					wg.Go(func() {
						for i := range steps {
							step := int64(10 * ms)
							if i%100 == 0 {
								step = int64(2 * time.Minute) // the others go idle
							}
							now := clock.Add(step)
							if i%10 == 0 {
								removed.Add(int64(l.Sweep(now-int64(time.Minute), 1<<20)))
							}
							k := (i / 100) % keys // each key rests while the others run
							if d := l.Take(fmt.Sprint("account:", k), now, c.rule, 1); d.Allowed {
								admitted[k].Add(1)
							}
						}
					})
				}
				wg.Wait()
				span := clock.Load() - t0
				for k := range admitted {
					if got := admitted[k].Load(); !withinBound(got, c, span) {
						t.Errorf("key %d admitted %d hits in %v, over the bound", k, got, time.Duration(span))
					}
				}
				if removed.Load() == 0 {
					t.Errorf("nothing was swept; the test did not exercise retirement")
				}
			})
		}
	}
}
