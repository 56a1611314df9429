package bucket

import (
	"testing"
	"time"

	"github.com/shardlimiter/shardlimiter/limit"
)

// wait is an admitted leaky-bucket decision whose caller must wait delay.
func wait(remaining int64, reset, delay time.Duration) limit.Decision {
	d := ok(remaining, reset)
	d.Delay = delay
	return d
}

func TestLeakyBucketSteps(t *testing.T) {
	t.Parallel()
	// T = 100ms; a queue of 2 plus the slot in service.
	queue2 := limit.Rule{Algorithm: limit.LeakyBucket, Limit: 10, Period: sec, Burst: 2}
	strict := limit.Rule{Algorithm: limit.LeakyBucket, Limit: 10, Period: sec}
	queue5 := limit.Rule{Algorithm: limit.LeakyBucket, Limit: 10, Period: sec, Burst: 5}
	faster := limit.Rule{Algorithm: limit.LeakyBucket, Limit: 20, Period: sec, Burst: 5}
	runSteps(t, leakyImpls, []stepCase{
		{"queue fills then drains at the rate", queue2, []step{
			{at: 0, hits: 1, want: wait(2, 100*ms, 0)},
			{at: 0, hits: 1, want: wait(1, 200*ms, 100*ms)},
			{at: 0, hits: 1, want: wait(0, 300*ms, 200*ms)},
			{at: 0, hits: 1, want: no(0, 300*ms, 100*ms)},
			{at: 100 * ms, hits: 1, want: wait(0, 400*ms, 200*ms)},
			{at: 250 * ms, hits: 2, want: no(1, 400*ms, 50*ms)},
			{at: 300 * ms, hits: 2, want: wait(0, 600*ms, 100*ms)},
		}},
		{"burst 0 is strict spacing", strict, []step{
			{at: 0, hits: 1, want: wait(0, 100*ms, 0)},
			{at: 50 * ms, hits: 1, want: no(0, 100*ms, 50*ms)},
			{at: 100*ms - 1, hits: 1, want: no(0, 100*ms, 1)},
			{at: 100 * ms, hits: 1, want: wait(0, 200*ms, 0)},
			{at: 100 * ms, hits: 2, want: no(0, 200*ms, limit.Never)},
			{at: 500 * ms, hits: 1, want: wait(0, 600*ms, 0)},
		}},
		{"peek reports the delay one hit would get", queue2, []step{
			{at: 0, hits: 2, want: wait(1, 200*ms, 0)},
			{at: 0, hits: 0, want: wait(1, 200*ms, 200*ms)},
			{at: 0, hits: 1, want: wait(0, 300*ms, 200*ms)},
			{at: 0, hits: 0, want: no(0, 300*ms, 100*ms)},
		}},
		{"reset empties the queue", queue2, []step{
			{at: 0, hits: 3, want: wait(0, 300*ms, 0)},
			{at: 0, hits: 1, b: limit.Reset, want: wait(2, 100*ms, 0)},
		}},
		{"count rejected is capped at one period of debt", queue2, []step{
			{at: 0, hits: 3, want: wait(0, 300*ms, 0)},
			{at: 0, hits: 2, b: limit.CountRejected, want: no(0, 500*ms, 400*ms)},
			{at: 0, hits: 3, b: limit.CountRejected, want: no(0, 800*ms, 800*ms)},
			{at: 0, hits: 3, b: limit.CountRejected, want: no(0, 1100*ms, 1100*ms)},
			{at: 0, hits: 3, b: limit.CountRejected, want: no(0, 1300*ms, 1300*ms)},
			{at: 0, hits: 4, b: limit.CountRejected, want: no(0, 1300*ms, limit.Never)},
			{at: 1100 * ms, hits: 1, want: wait(0, 1400*ms, 200*ms)},
		}},
		{"hits beyond the queue never fit", queue2, []step{
			{at: 0, hits: 4, want: no(3, 0, limit.Never)},
			{at: 0, hits: 3, want: wait(0, 300*ms, 0)},
		}},
		{"retry after is exact", queue2, []step{
			{at: 0, hits: 3, want: wait(0, 300*ms, 0)},
			{at: 0, hits: 2, want: no(0, 300*ms, 200*ms)},
			{at: 200*ms - 1, hits: 2, want: no(1, 300*ms, 1)},
			{at: 200 * ms, hits: 2, want: wait(0, 500*ms, 100*ms)},
		}},
		{"rule change keeps the queued hits", queue2, []step{
			{at: 0, hits: 3, want: wait(0, 300*ms, 0)},
			// A deeper queue: the 3 queued hits keep their slots.
			{at: 0, rule: &queue5, want: wait(3, 300*ms, 300*ms)},
			// A faster rate: they drain in half the time.
			{at: 0, rule: &faster, want: wait(3, 150*ms, 150*ms)},
			// Strict spacing at the old rate: all three drain first.
			{at: 0, rule: &strict, want: no(0, 300*ms, 300*ms)},
		}},
		{"clock backwards never admits a burst", queue2, []step{
			{at: 10 * sec, hits: 3, want: wait(0, 10300*ms, 0)},
			{at: 9 * sec, hits: 1, want: no(0, 10300*ms, 1100*ms)},
			{at: 10200 * ms, hits: 1, want: wait(1, 10400*ms, 100*ms)},
		}},
	})
}
