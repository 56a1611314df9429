package bucket

import (
	"testing"
	"time"

	"github.com/shardlimiter/shardlimiter/limit"
)

func TestWarmupSteps(t *testing.T) {
	t.Parallel()
	// Stable T = 100ms; warm-up 2 s: maxPermits 20, threshold 10, the
	// coldest permit costs 300ms. Spending the permit from level s to s−1
	// above the threshold costs 100ms + 10ms × ((s−10)² − (s−11)²).
	guava := limit.Rule{Limit: 10, Period: sec, Warmup: 2 * sec, Burst: 1}
	burst10 := limit.Rule{Limit: 10, Period: sec, Warmup: 2 * sec}
	longer := limit.Rule{Limit: 10, Period: sec, Warmup: 4 * sec, Burst: 1}
	plain := limit.Rule{Limit: 10, Period: sec, Burst: 1}
	runSteps(t, tokenImpls, []stepCase{
		{"cold key starts at a third of the rate", guava, []step{
			{at: 0, hits: 1, want: ok(0, 290*ms)},
			{at: 0, hits: 1, want: no(0, 290*ms, 290*ms)},
			{at: 290*ms - 1, hits: 1, want: no(0, 290*ms, 1)},
			{at: 290 * ms, hits: 1, want: ok(0, 560*ms)},
			{at: 560 * ms, hits: 0, want: ok(1, 560*ms)},
		}},
		{"a cold key spends its burst three times as fast", burst10, []step{
			{at: 0, hits: 1, want: ok(7, 290*ms)},
			{at: 0, hits: 3, want: ok(0, 1040*ms)},
			{at: 0, hits: 1, want: no(0, 1040*ms, 140*ms)},
		}},
		{"warm key runs at the stable rate, idle time cools it", burst10, []step{
			{at: 0, hits: 10, want: ok(0, 2*sec)},          // 20 → 10 permits: 1 s + 1 s
			{at: 2 * sec, hits: 10, want: ok(0, 3*sec)},    // 10 → 0: stable
			{at: 4 * sec, hits: 1, want: ok(9, 4100*ms)},   // idle 1 s: back to 10
			{at: 6100 * ms, hits: 1, want: ok(7, 6390*ms)}, // idle 2 s: cold
		}},
		{"peek and reset", guava, []step{
			{at: 0, hits: 1, want: ok(0, 290*ms)},
			{at: 0, hits: 0, want: no(0, 290*ms, 290*ms)},
			{at: 0, hits: 1, b: limit.Reset, want: ok(0, 290*ms)},
			{at: 0, hits: 0, b: limit.Reset, want: ok(1, 0)},
		}},
		{"counted rejections spend no stored permits", guava, []step{
			{at: 0, hits: 1, want: ok(0, 290*ms)},
			{at: 0, hits: 1, b: limit.CountRejected, want: no(0, 390*ms, 390*ms)},
			{at: 390 * ms, hits: 1, want: ok(0, 660*ms)}, // 19 → 18: 270ms
			{at: 390 * ms, hits: 1, b: limit.CountRejected, want: no(0, 760*ms, 370*ms)},
			{at: 390 * ms, hits: 1000, b: limit.CountRejected, want: no(0, 1490*ms, limit.Never)}, // capped: 1.1 s of debt
		}},
		{"hits beyond capacity never fit", burst10, []step{
			{at: 0, hits: 11, want: no(10, 0, limit.Never)},
			{at: 0, hits: 10, want: ok(0, 2*sec)},
		}},
		{"rule change keeps the fraction of coldness", guava, []step{
			{at: 0, hits: 0, want: ok(1, 0)},
			// Fully cold stays fully cold: 40 of 40 permits, 100 + 195ms.
			{at: 0, rule: &longer, hits: 1, want: ok(0, 295*ms)},
			// Warm-up off: the same capacity in time, plain GCRA.
			{at: 295 * ms, rule: &plain, hits: 1, want: ok(0, 395*ms)},
			// Back on: the coldness it had (39 of 40) is kept.
			{at: 395 * ms, rule: &longer, hits: 1, want: ok(0, 680*ms)},
		}},
		{"clock backwards never admits a burst", guava, []step{
			{at: 10 * sec, hits: 1, want: ok(0, 10290*ms)},
			{at: 5 * sec, hits: 1, want: no(0, 10290*ms, 5290*ms)},
			{at: 10290 * ms, hits: 1, want: ok(0, 10560*ms)},
		}},
	})
}

// TestWarmupFromAThirdToStableRate is seed 002's example: a cold limiter
// admits at about a third of its stable rate and reaches the stable rate
// after the warm-up period. A client retries exactly after RetryAfter; the
// test measures the spacing of its admissions.
//
// Tolerances: the first spacing is the cost of the coldest permit, which
// is 2.9 stable intervals (the curve's average over the top permit), so it
// is asserted within 5% of 3×; once the warm-up period has passed every
// spacing is the stable interval within 1%; the warm-up is over within 1 ms
// of t0 + Warmup.
func TestWarmupFromAThirdToStableRate(t *testing.T) {
	t.Parallel()
	r := limit.Rule{Limit: 10, Period: sec, Warmup: 2 * sec, Burst: 1}
	stable := float64(100 * ms)
	for _, im := range tokenImpls {
		t.Run(im.name, func(t *testing.T) {
			t.Parallel()
			l := im.new()
			var admitted []int64
			for now := t0; now < t0+int64(4*sec); {
				d := l.Take("account:42", now, r, 1)
				switch {
				case d.Allowed:
					admitted = append(admitted, now)
				case d.RetryAfter > 0:
					now += int64(d.RetryAfter)
				default:
					t.Fatalf("Take(%q, %s, 1) = %+v: rejected without a RetryAfter", "account:42", instant(time.Duration(now-t0)), d)
				}
			}
			if first := float64(admitted[1] - admitted[0]); first < 0.95*3*stable || first > 1.05*3*stable {
				t.Errorf("first spacing %v, want 3×%v within 5%%", time.Duration(first), time.Duration(stable))
			}
			warm := -1
			for i := 1; i < len(admitted); i++ {
				gap := admitted[i] - admitted[i-1]
				if i > 1 && gap > admitted[i-1]-admitted[i-2] {
					t.Errorf("spacing grew at admission %d: %v after %v", i, time.Duration(gap), time.Duration(admitted[i-1]-admitted[i-2]))
				}
				if warm < 0 && float64(gap) <= 1.01*stable {
					warm = i - 1
				}
				if admitted[i-1] >= t0+int64(r.Warmup) && (float64(gap) < 0.99*stable || float64(gap) > 1.01*stable) {
					t.Errorf("spacing %v at %s, after the warm-up; want %v within 1%%", time.Duration(gap), instant(time.Duration(admitted[i-1]-t0)), time.Duration(stable))
				}
			}
			if warm < 0 {
				t.Fatalf("never reached the stable rate; admitted at %v", admitted)
			}
			if at := time.Duration(admitted[warm] - t0); at < r.Warmup-ms || at > r.Warmup+ms {
				t.Errorf("stable rate reached at t0+%v, want t0+%v within 1ms", at, r.Warmup)
			}
		})
	}
}
