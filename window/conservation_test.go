package window

import (
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/shardlimiter/shardlimiter/limit"
)

// admit is one admitted take: its instant and hits.
type admit struct{ at, hits int64 }

// hammer runs ticks of simulated time on one key: at each tick, workers
// goroutines each make takes checks at the tick's instant, concurrently,
// while another goroutine sweeps the table at that instant. A second key,
// "cold", is used every 100th tick only, so the sweep retires it between
// uses and races the takes that bring it back. hammer returns the admitted
// takes of the hot key, sorted by instant, and the takes admitted per tick
// on both keys.
//
// Within a tick every take carries the same now, so the outcome is as if
// the takes were serialized in some order; across ticks time only moves
// forward, so the bounds below hold on the takes' own instants.
func hammer(l limit.Limiter, r limit.Rule, ticks int, step int64, workers, takes int, hits func(w, i int) int64) ([]admit, []int) {
	var (
		mu      sync.Mutex
		all     []admit
		perTick = make([]int, 2*ticks)
	)
	for tick := range ticks {
		now := t0 + int64(tick)*step
		var wg sync.WaitGroup
		wg.Go(func() { l.Sweep(now, 1<<20) })
		for w := range workers {
			wg.Go(func() {
				var mine []admit
				cold := 0
				for i := range takes {
					h := hits(w, i)
					if l.Take("hot", now, r, h).Allowed && h > 0 {
						mine = append(mine, admit{now, h})
					}
					if tick%100 == 0 && l.Take("cold", now, r, 1).Allowed {
						cold++
					}
				}
				mu.Lock()
				all = append(all, mine...)
				perTick[2*tick] += len(mine)
				perTick[2*tick+1] += cold
				mu.Unlock()
			})
		}
		wg.Wait()
	}
	slices.SortFunc(all, func(a, b admit) int { return int(a.at - b.at) })
	return all, perTick
}

// maxInSpan returns the most hits admitted in any span [t, t+p).
func maxInSpan(all []admit, p int64) int64 {
	var best, sum int64
	j := 0
	for i := range all {
		for ; j < len(all) && all[j].at < all[i].at+p; j++ {
			sum += all[j].hits
		}
		best = max(best, sum)
		sum -= all[i].hits
	}
	return best
}

// maxInWindow returns the most hits admitted in one aligned window of p.
func maxInWindow(all []admit, p int64) int64 {
	per := map[int64]int64{}
	var best int64
	for _, a := range all {
		per[a.at/p] += a.hits
		best = max(best, per[a.at/p])
	}
	return best
}

func mixedHits(w, i int) int64 { return int64(1 + (w+i)%3) }
func oneHit(int, int) int64    { return 1 }

// TestConservation: N goroutines on one key never admit more than each
// algorithm's bound, in the packed and in the mutex representation (the
// 200-per-ms rules cross the packed counts' bounds mid-window), and admit
// exactly what a serial run admits when all hits are equal.
func TestConservation(t *testing.T) {
	t.Parallel()
	ms := int64(time.Millisecond)
	cases := []struct {
		name  string
		l     func() limit.Limiter
		r     limit.Rule
		step  int64
		bound func(all []admit, r limit.Rule) (got, max int64)
	}{
		{"fixed", func() limit.Limiter { return NewFixed(testCfg) },
			limit.Rule{Algorithm: limit.FixedWindow, Limit: 50, Period: time.Second}, 37 * ms, perWindow},
		{"fixed/wide", func() limit.Limiter { return NewFixed(testCfg) },
			limit.Rule{Algorithm: limit.FixedWindow, Limit: 50, Period: 300 * time.Microsecond}, 70_000, perWindow},
		{"sliding", func() limit.Limiter { return NewSliding(testCfg) },
			limit.Rule{Algorithm: limit.SlidingWindow, Limit: 50, Period: time.Second}, 37 * ms, slidingBound},
		{"sliding/crossing", func() limit.Limiter { return NewSliding(testCfg) },
			limit.Rule{Algorithm: limit.SlidingWindow, Limit: 200, Period: time.Millisecond}, ms / 8, slidingBound},
		{"log", func() limit.Limiter { return NewLog(testCfg) },
			limit.Rule{Algorithm: limit.SlidingLog, Limit: 50, Period: time.Second}, 37 * ms, perSpan},
		{"log/interval", func() limit.Limiter { return NewLog(testCfg) },
			limit.Rule{Algorithm: limit.SlidingLog, Limit: 50, Period: time.Second, MinInterval: 10 * time.Millisecond}, 7 * ms, perSpan},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			all, _ := hammer(tc.l(), tc.r, 300, tc.step, 4, 30, mixedHits)
			if got, bound := tc.bound(all, tc.r); got > bound {
				t.Fatalf("%s: %d hits admitted where the bound is %d", tc.r.Algorithm, got, bound)
			}
			_, concurrent := hammer(tc.l(), tc.r, 300, tc.step, 4, 30, oneHit)
			_, serial := hammer(tc.l(), tc.r, 300, tc.step, 1, 4*30, oneHit)
			if !slices.Equal(concurrent, serial) {
				t.Fatalf("%s: admitted per tick with 4 goroutines %v, serially %v; want equal", tc.r.Algorithm, concurrent, serial)
			}
		})
	}
}

func perWindow(all []admit, r limit.Rule) (int64, int64) {
	return maxInWindow(all, int64(r.Period)), r.Limit
}

func perSpan(all []admit, r limit.Rule) (int64, int64) {
	return maxInSpan(all, int64(r.Period)), r.Limit
}

// slidingBound checks both bounds of the sliding window: Limit per aligned
// window, 2×Limit−1 per span (see the package doc).
func slidingBound(all []admit, r limit.Rule) (int64, int64) {
	if w := maxInWindow(all, int64(r.Period)); w > r.Limit {
		return w, r.Limit
	}
	return maxInSpan(all, int64(r.Period)), 2*r.Limit - 1
}
