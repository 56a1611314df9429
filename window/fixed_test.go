package window

import (
	"math"
	"testing"
	"time"

	"github.com/shardlimiter/shardlimiter/limit"
)

var perMinute = limit.Rule{Algorithm: limit.FixedWindow, Limit: 10, Period: time.Minute}

// Instants of the fixed-window tables: t0 starts a minute-long window,
// end0 ends it (and starts the next), end1 ends the next.
var (
	t0   = alignedStart(time.Minute)
	end0 = t0 + int64(time.Minute)
	end1 = end0 + int64(time.Minute)
	sec  = int64(time.Second)
)

// TestFixedBoundaryDoubleBurst shows the documented weakness of fixed
// windows: 10 hits in the last nanosecond of a window and 10 in the first
// of the next are all admitted, 2×Limit within 1 ns.
func TestFixedBoundaryDoubleBurst(t *testing.T) {
	t.Parallel()
	runSteps(t, fixedImpls(), perMinute, []step{
		{at: "end0-1ns", now: end0 - 1, hits: 10, want: ok(0, end0)},
		{at: "end0-1ns", now: end0 - 1, hits: 1, want: no(0, end0, 1)},
		{at: "end0", now: end0, hits: 10, want: ok(0, end1)},
		{at: "end0", now: end0, hits: 1, want: no(0, end1, time.Minute)},
	})
}

func TestFixedSteps(t *testing.T) {
	t.Parallel()
	runSteps(t, fixedImpls(), perMinute, []step{
		{at: "t0", now: t0, hits: 0, want: ok(10, end0)},
		{at: "t0+1s", now: t0 + sec, hits: 3, want: ok(7, end0)},
		{at: "t0+2s", now: t0 + 2*sec, hits: 8, want: no(7, end0, 58*time.Second)},
		{at: "t0+2s", now: t0 + 2*sec, hits: 11, want: no(7, end0, limit.Never)},
		{at: "t0+3s", now: t0 + 3*sec, hits: 7, want: ok(0, end0)},
		// A peek answers as one hit would, and changes nothing.
		{at: "t0+4s", now: t0 + 4*sec, hits: 0, want: no(0, end0, 56*time.Second)},
		{at: "t0+4s", now: t0 + 4*sec, hits: 0, want: no(0, end0, 56*time.Second)},
		// RetryAfter is exact: 1 ns before the window ends, still rejected.
		{at: "end0-1ns", now: end0 - 1, hits: 8, want: no(0, end0, 1)},
		{at: "end0", now: end0, hits: 8, want: ok(2, end1)},
		{at: "end0+1s", now: end0 + sec, hits: 10, want: no(2, end1, 59*time.Second)},
	})
}

func TestFixedCountRejected(t *testing.T) {
	t.Parallel()
	counting := with(perMinute, func(r *limit.Rule) { r.Behavior = limit.CountRejected })
	runSteps(t, fixedImpls(), perMinute, []step{
		{at: "t0", now: t0, hits: 8, want: ok(2, end0)},
		// Plain: the rejected 5 consume nothing, 2 still fit.
		{at: "t0+1s", now: t0 + sec, hits: 5, want: no(2, end0, 59*time.Second)},
		// Counting: the rejected 5 count, up to the limit.
		{at: "t0+1s", now: t0 + sec, hits: 5, rule: counting, want: no(0, end0, 59*time.Second)},
		{at: "t0+2s", now: t0 + 2*sec, hits: 1, want: no(0, end0, 58*time.Second)},
		{at: "end0", now: end0, hits: 11, rule: counting, want: no(0, end1, limit.Never)},
		{at: "end0+1s", now: end0 + sec, hits: 1, want: no(0, end1, 59*time.Second)},
		// A peek never counts.
		{at: "end1", now: end1, hits: 0, rule: counting, want: ok(10, end1+int64(time.Minute))},
		{at: "end1", now: end1, hits: 10, want: ok(0, end1+int64(time.Minute))},
	})
}

func TestFixedReset(t *testing.T) {
	t.Parallel()
	reset := with(perMinute, func(r *limit.Rule) { r.Behavior = limit.Reset })
	runSteps(t, fixedImpls(), perMinute, []step{
		{at: "t0", now: t0, hits: 10, want: ok(0, end0)},
		{at: "t0+1s", now: t0 + sec, hits: 1, rule: reset, want: ok(9, end0)},
		{at: "t0+2s", now: t0 + 2*sec, hits: 9, want: ok(0, end0)},
		// Reset with a peek empties the key too.
		{at: "t0+3s", now: t0 + 3*sec, hits: 0, rule: reset, want: ok(10, end0)},
		{at: "t0+4s", now: t0 + 4*sec, hits: 10, want: ok(0, end0)},
	})
}

// TestFixedRuleChange: a new Limit applies to the current count at once; a
// Period of another octave restarts the count.
func TestFixedRuleChange(t *testing.T) {
	t.Parallel()
	hourEnd := alignedStart(time.Hour)
	if hourEnd <= t0+5*sec {
		t.Fatalf("test instants: hour end %d not after t0+5s %d", hourEnd, t0+5*sec)
	}
	runSteps(t, fixedImpls(), perMinute, []step{
		{at: "t0", now: t0, hits: 6, want: ok(4, end0)},
		{at: "t0+1s", now: t0 + sec, hits: 5, rule: with(perMinute, func(r *limit.Rule) { r.Limit = 20 }), want: ok(9, end0)},
		{at: "t0+2s", now: t0 + 2*sec, hits: 1, rule: with(perMinute, func(r *limit.Rule) { r.Limit = 5 }), want: no(0, end0, 58*time.Second)},
		{at: "t0+3s", now: t0 + 3*sec, hits: 1, want: no(0, end0, 57*time.Second)},
		{at: "t0+4s", now: t0 + 4*sec, hits: 1, rule: with(perMinute, func(r *limit.Rule) { r.Period = time.Hour }), want: ok(9, hourEnd)},
		{at: "t0+5s", now: t0 + 5*sec, hits: 1, want: ok(9, end0)},
	})
}

// TestFixedClockBackwards: a now before the stored window counts in the
// stored window; it never opens a fresh one.
func TestFixedClockBackwards(t *testing.T) {
	t.Parallel()
	maxEnd := (MaxTime/int64(time.Minute) + 1) * int64(time.Minute)
	runSteps(t, fixedImpls(), perMinute, []step{
		{at: "end0+1s", now: end0 + sec, hits: 10, want: ok(0, end1)},
		{at: "end0-5s", now: end0 - 5*sec, hits: 1, want: no(0, end1, 65*time.Second)},
		{at: "end0-5s", now: end0 - 5*sec, hits: 0, want: no(0, end1, 65*time.Second)},
		{at: "t0-1h", now: t0 - int64(time.Hour), hits: 1, want: no(0, end1, time.Duration(end1-t0)+time.Hour)},
		{at: "-5ns", now: -5, hits: 1, want: no(0, end1, time.Duration(end1))},
		{at: "MinInt64", now: math.MinInt64, hits: 1, want: no(0, end1, time.Duration(end1))},
		{at: "end1", now: end1, hits: 1, want: ok(9, end1+int64(time.Minute))},
		{at: "MaxInt64", now: math.MaxInt64, hits: 1, want: ok(9, maxEnd)},
		// A now far ahead moved the key into its window: earlier instants
		// count there, until the clock gets there.
		{at: "end1+1s", now: end1 + sec, hits: 1, want: ok(8, maxEnd)},
	})
}

// TestFixedOverdraft: envoyproxy/ratelimit's counting. Every hit counts and
// the count may pass the limit; a peek is refused only when the count is
// already over the limit (token quotas check with 0 hits, then report the
// use).
func TestFixedOverdraft(t *testing.T) {
	t.Parallel()
	quota := with(perMinute, func(r *limit.Rule) { r.Behavior = limit.Overdraft })
	runSteps(t, fixedImpls(), perMinute, []step{
		{at: "t0", now: t0, hits: 10, rule: quota, want: ok(0, end0)},
		// At the limit, not over it: a 0-hit check passes.
		{at: "t0+1s", now: t0 + sec, hits: 0, rule: quota, want: ok(0, end0)},
		// A plain peek answers as one hit would.
		{at: "t0+1s", now: t0 + sec, hits: 0, want: no(0, end0, 59*time.Second)},
		// A report over the limit is refused and counted in full...
		{at: "t0+2s", now: t0 + 2*sec, hits: 3, rule: quota, want: no(0, end0, 58*time.Second)},
		// ...so the next 0-hit check is refused until the window ends.
		{at: "t0+3s", now: t0 + 3*sec, hits: 0, rule: quota, want: no(0, end0, 57*time.Second)},
		{at: "end0", now: end0, hits: 0, rule: quota, want: ok(10, end1)},
		// Over by the hits of one check: 13 of 10 after 9 + 4.
		{at: "end0", now: end0, hits: 9, rule: quota, want: ok(1, end1)},
		{at: "end0", now: end0, hits: 4, rule: quota, want: no(0, end1, time.Minute)},
		{at: "end0+1s", now: end0 + sec, hits: 11, rule: quota, want: no(0, end1, limit.Never)},
		{at: "end0+1s", now: end0 + sec, hits: 0, rule: quota, want: no(0, end1, 59*time.Second)},
	})
}
