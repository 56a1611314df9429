package window

import (
	"testing"
	"time"

	"github.com/shardlimiter/shardlimiter/limit"
)

// slidingMinute is 10 hits per sliding minute. The instants t0, end0, end1
// of fixed_test.go bound its windows W0 = [t0, end0) and W1 = [end0, end1).
var slidingMinute = limit.Rule{Algorithm: limit.SlidingWindow, Limit: 10, Period: time.Minute}

const minute = int64(time.Minute)

// TestSlidingSeedExample is the seed's example: 9 hits in the previous
// window, and a check of 5 hits 25% into the current one: 9×0.75 + 5 =
// 11.75 > 10, rejected.
func TestSlidingSeedExample(t *testing.T) {
	t.Parallel()
	t25 := end0 + 15*sec
	// 9×(end1−t)/60s ≤ 5 from t = end1 − ⌊5×60s/9⌋ on.
	retry := time.Duration(end1 - int64(5*time.Minute/9) - t25)
	runSteps(t, slidingImpls(), slidingMinute, []step{
		{at: "t0+1s", now: t0 + sec, hits: 9, want: ok(1, end1)},
		// The estimate 6.75 rounds up: 3 remain.
		{at: "t25", now: t25, hits: 5, want: no(3, end1, retry)},
		{at: "t25+retry-1ns", now: t25 + int64(retry) - 1, hits: 5, want: no(4, end1, 1)},
		{at: "t25+retry", now: t25 + int64(retry), hits: 5, want: ok(0, end1+minute)},
	})
	runSteps(t, slidingImpls(), slidingMinute, []step{
		{at: "t0+1s", now: t0 + sec, hits: 9, want: ok(1, end1)},
		{at: "t25", now: t25, hits: 4, want: no(3, end1, 5*time.Second)},
		{at: "t25", now: t25, hits: 3, want: ok(0, end1+minute)},
	})
}

// TestSlidingBoundary: the burst that a fixed window admits at a boundary
// is refused; the worst case of the estimate (2×Limit − 1 within a
// period) is reached only by a second burst at the end of the next window.
func TestSlidingBoundary(t *testing.T) {
	t.Parallel()
	runSteps(t, slidingImpls(), slidingMinute, []step{
		{at: "end0-1ns", now: end0 - 1, hits: 10, want: ok(0, end1)},
		{at: "end0", now: end0, hits: 1, want: no(0, end1, 6*time.Second)},
		{at: "end0+6s-1ns", now: end0 + 6*sec - 1, hits: 1, want: no(0, end1, 1)},
		{at: "end0+6s", now: end0 + 6*sec, hits: 1, want: ok(0, end1+minute)},
	})
	// 10 at end0−1ns and 9 at end1−2ns: 19 hits within P−1 ns.
	runSteps(t, slidingImpls(), slidingMinute, []step{
		{at: "end0-1ns", now: end0 - 1, hits: 10, want: ok(0, end1)},
		// The weighted part is ⌈10×2ns/60s⌉ = 1.
		{at: "end1-2ns", now: end1 - 2, hits: 10, want: no(9, end1, 2)},
		{at: "end1-2ns", now: end1 - 2, hits: 9, want: ok(0, end1+minute)},
	})
}

func TestSlidingSteps(t *testing.T) {
	t.Parallel()
	runSteps(t, slidingImpls(), slidingMinute, []step{
		{at: "t0", now: t0, hits: 0, want: ok(10, t0)},
		{at: "t0", now: t0, hits: 4, want: ok(6, end1)},
		{at: "t0", now: t0, hits: 11, want: no(6, end1, limit.Never)},
		// 4 + 7 > 10; in W1 the weighted 4 falls to 3 at end0+15s.
		{at: "t0+30s", now: t0 + 30*sec, hits: 7, want: no(6, end1, 45*time.Second)},
		{at: "end0+15s-1ns", now: end0 + 15*sec - 1, hits: 7, want: no(6, end1, 1)},
		{at: "end0+15s", now: end0 + 15*sec, hits: 7, want: ok(0, end1+minute)},
		// A peek answers for one hit: 3 + 7 + 1 ≤ 10 once the weighted
		// part is 2, at end0+30s.
		{at: "end0+15s", now: end0 + 15*sec, hits: 0, want: no(0, end1+minute, 15*time.Second)},
		{at: "end0+30s", now: end0 + 30*sec, hits: 1, want: ok(0, end1+minute)},
	})
}

func TestSlidingCountRejectedAndReset(t *testing.T) {
	t.Parallel()
	counting := with(slidingMinute, func(r *limit.Rule) { r.Behavior = limit.CountRejected })
	reset := with(slidingMinute, func(r *limit.Rule) { r.Behavior = limit.Reset })
	runSteps(t, slidingImpls(), slidingMinute, []step{
		{at: "t0", now: t0, hits: 8, want: ok(2, end1)},
		// The rejected 5 count, up to the limit: cur 10, whose weight
		// falls to 5 at end0+30s.
		{at: "t0+1s", now: t0 + sec, hits: 5, rule: counting, want: no(0, end1, 89*time.Second)},
		{at: "t0+2s", now: t0 + 2*sec, hits: 1, want: no(0, end1, 64*time.Second)},
		{at: "t0+3s", now: t0 + 3*sec, hits: 1, rule: reset, want: ok(9, end1)},
		{at: "t0+4s", now: t0 + 4*sec, hits: 11, rule: counting, want: no(0, end1, limit.Never)},
	})
}

// TestSlidingClockBackwards: a now before the stored window counts at the
// stored window's start, where the estimate is highest.
func TestSlidingClockBackwards(t *testing.T) {
	t.Parallel()
	runSteps(t, slidingImpls(), slidingMinute, []step{
		{at: "end0+30s", now: end0 + 30*sec, hits: 10, want: ok(0, end1+minute)},
		{at: "end0-5s", now: end0 - 5*sec, hits: 1, want: no(0, end1+minute, 71*time.Second)},
		{at: "-1ns", now: -1, hits: 1, want: no(0, end1+minute, time.Duration(end1+6*sec))},
		{at: "end1+6s-1ns", now: end1 + 6*sec - 1, hits: 1, want: no(0, end1+minute, 1)},
		{at: "end1+6s", now: end1 + 6*sec, hits: 1, want: ok(0, end1+2*minute)},
	})
}

func TestSlidingRuleChange(t *testing.T) {
	t.Parallel()
	hourEnd := alignedStart(time.Hour)
	// Limit 5 with 11 counted: the estimate 11×(end1−t)/60s must reach 4.
	retry := time.Duration(end1 - int64(4*time.Minute/11) - (t0 + 2*sec))
	runSteps(t, slidingImpls(), slidingMinute, []step{
		{at: "t0", now: t0, hits: 6, want: ok(4, end1)},
		{at: "t0+1s", now: t0 + sec, hits: 5, rule: with(slidingMinute, func(r *limit.Rule) { r.Limit = 20 }), want: ok(9, end1)},
		{at: "t0+2s", now: t0 + 2*sec, hits: 1, rule: with(slidingMinute, func(r *limit.Rule) { r.Limit = 5 }), want: no(0, end1, retry)},
		{at: "t0+4s", now: t0 + 4*sec, hits: 1, rule: with(slidingMinute, func(r *limit.Rule) { r.Period = time.Hour }), want: ok(9, hourEnd+int64(time.Hour))},
	})
}

// TestSlidingOverdraft: every hit counts, past the limit, and the excess
// weighs on the next window as any count does; a peek is refused only
// while the estimate is over the limit.
func TestSlidingOverdraft(t *testing.T) {
	t.Parallel()
	quota := with(slidingMinute, func(r *limit.Rule) { r.Behavior = limit.Overdraft })
	runSteps(t, slidingImpls(), slidingMinute, []step{
		{at: "t0", now: t0, hits: 10, rule: quota, want: ok(0, end1)},
		{at: "t0+1s", now: t0 + sec, hits: 0, rule: quota, want: ok(0, end1)},
		// 15 counted: over until 15×(end1−t)/60s ≤ 10, at end0+20s.
		{at: "t0+1s", now: t0 + sec, hits: 5, rule: quota, want: no(0, end1, 99*time.Second)},
		{at: "t0+2s", now: t0 + 2*sec, hits: 0, rule: quota, want: no(0, end1, 78*time.Second)},
		{at: "end0+20s-1ns", now: end0 + 20*sec - 1, hits: 0, rule: quota, want: no(0, end1, 1)},
		{at: "end0+20s", now: end0 + 20*sec, hits: 0, rule: quota, want: ok(0, end1)},
	})
}
