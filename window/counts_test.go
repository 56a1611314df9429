package window

import (
	"testing"
	"time"

	"github.com/shardlimiter/shardlimiter/limit"
	"github.com/shardlimiter/shardlimiter/table"
)

func TestStateCounts(t *testing.T) {
	t.Parallel()
	const sec = int64(time.Second)
	t0 := 1_700_000_000 * sec // a multiple of the period: a window starts here
	for _, tc := range []struct {
		a    limit.Algorithm
		want Counts
	}{
		{a: limit.FixedWindow, want: Counts{WindowEnd: t0 + 10*sec, Current: 4}},
		{a: limit.SlidingWindow, want: Counts{WindowEnd: t0 + 10*sec, Previous: 3, Current: 4}},
		{a: limit.SlidingLog, want: Counts{Current: 4}},
	} {
		var l limit.Limiter
		switch tc.a {
		case limit.FixedWindow:
			l = NewFixed(table.Config{})
		case limit.SlidingWindow:
			l = NewSliding(table.Config{})
		default:
			l = NewLog(table.Config{})
		}
		r := limit.Rule{Algorithm: tc.a, Limit: 100, Period: 10 * time.Second}
		l.Take("k", t0-5*sec, r, 3) // the window before (for the log: older than a period at t0+6s)
		l.Take("k", t0+1*sec, r, 4)
		state, ok := l.Export("k", t0+6*sec)
		if !ok {
			t.Fatalf("%v: Export found nothing", tc.a)
		}
		got, err := StateCounts(state, t0+6*sec, r)
		if err != nil || got != tc.want {
			t.Errorf("%v: StateCounts(t0+6s) = %+v, %v, want %+v", tc.a, got, err, tc.want)
		}
		if _, err := StateCounts(state[:1], t0, r); err == nil {
			t.Errorf("%v: StateCounts of a truncated state: no error", tc.a)
		}
	}
}
