package gubernator

import (
	"testing"
	"time"

	"github.com/shardlimiter/shardlimiter/limit"
)

// The step tables below are the sequences of gubernator's own
// functional_test.go, played on one Item at named instants (Unix ms) in
// place of its frozen clock, with the answers gubernator gives.

const (
	tb = limit.GubernatorTokenBucket
	lb = limit.GubernatorLeakyBucket
)

// t0 is 2026-11-25 11:20:10 UTC: 49.99 s before its minute ends.
var t0 = time.Date(2026, 11, 25, 11, 20, 10, 0, time.UTC).UnixMilli()

type step struct {
	name string
	at   int64 // ms after t0
	req  Request
	want Response
}

// play runs steps on one fresh Item, each at t0+at with created_at unset.
func play(t *testing.T, steps []step) {
	t.Helper()
	var it Item
	for _, s := range steps {
		got := Take(&it, t0+s.at, s.req)
		if got != s.want {
			t.Errorf("%s: Take(t0+%d, %+v) = %+v, want %+v", s.name, s.at, s.req, got, s.want)
		}
	}
}

func under(lim, rem, reset int64) Response {
	return Response{Limit: lim, Remaining: rem, ResetTime: reset}
}
func over(lim, rem, reset int64) Response {
	return Response{Over: true, Limit: lim, Remaining: rem, ResetTime: reset}
}

func TestTokenBucketSteps(t *testing.T) {
	t.Parallel()
	r := func(hits int64) Request { return Request{Algorithm: tb, Hits: hits, Limit: 2, Duration: 9000} }
	t.Run("over the limit", func(t *testing.T) {
		play(t, []step{
			{"first", 0, r(1), under(2, 1, t0+9000)},
			{"second", 0, r(1), under(2, 0, t0+9000)},
			{"third is over", 0, r(1), over(2, 0, t0+9000)},
			// gubernator stores the status: a report in the same window says OVER_LIMIT too
			{"report keeps the status", 1, r(0), over(2, 0, t0+9000)},
			{"window ends: starts over", 9001, r(1), under(2, 1, t0+9001+9000)},
		})
	})
	t.Run("expiry after duration", func(t *testing.T) {
		r := func(hits int64) Request { return Request{Algorithm: tb, Hits: hits, Limit: 2, Duration: 5} }
		play(t, []step{
			{"remaining one", 0, r(1), under(2, 1, t0+5)},
			{"remaining zero", 0, r(1), under(2, 0, t0+5)},
			{"at the reset time it is still live", 5, r(0), under(2, 0, t0+5)},
			{"100 ms later a new window", 100, r(1), under(2, 1, t0+105)},
		})
	})
	t.Run("negative hits", func(t *testing.T) {
		r := func(hits int64) Request { return Request{Algorithm: tb, Hits: hits, Limit: 2, Duration: 5} }
		play(t, []step{
			{"three", 0, r(-1), under(2, 3, t0+5)},
			{"four", 0, r(-1), under(2, 4, t0+5)},
			{"zero", 0, r(4), under(2, 0, t0+5)},
			{"one", 0, r(-1), under(2, 1, t0+5)},
		})
	})
	t.Run("request more than available", func(t *testing.T) {
		r := func(hits int64) Request { return Request{Algorithm: tb, Hits: hits, Limit: 2000, Duration: 1000} }
		play(t, []step{
			{"half", 0, r(1000), under(2000, 1000, t0+1000)},
			{"too many: nothing consumed", 0, r(1500), over(2000, 1000, t0+1000)},
			{"500", 0, r(500), under(2000, 500, t0+1000)},
			{"400", 0, r(400), under(2000, 100, t0+1000)},
			{"100", 0, r(100), under(2000, 0, t0+1000)},
			{"over", 0, r(1), over(2000, 0, t0+1000)},
		})
	})
	t.Run("more than the limit on a new key", func(t *testing.T) {
		play(t, []step{{"refused, full", 0, r(3), over(2, 2, t0+9000)}, {"then one", 0, r(1), under(2, 1, t0+9000)}})
	})
	t.Run("gregorian minutes", func(t *testing.T) {
		r := func(hits int64) Request {
			return Request{Algorithm: tb, Hits: hits, Limit: 60, Duration: limit.GregorianMinutes, Behavior: limit.Gregorian}
		}
		end := t0 + 49_999 // 11:20:59.999
		play(t, []step{
			{"first hit", 0, r(1), under(60, 59, end)},
			{"second hit", 0, r(1), under(60, 58, end)},
			{"consume remaining", 0, r(58), under(60, 0, end)},
			{"over", 0, r(1), over(60, 0, end)},
			{"61 s later, the next minute", 61_000, r(0), under(60, 60, end+60_000)},
		})
	})
	t.Run("limit 0 and duration 0", func(t *testing.T) {
		play(t, []step{{"limit 0", 0, Request{Algorithm: tb, Hits: 1, Duration: 10000}, over(0, 0, t0+10000)}})
		play(t, []step{
			{"duration 0", 0, Request{Algorithm: tb, Hits: 1, Limit: 10}, under(10, 9, t0)},
			{"expired 1 ms later", 1, Request{Algorithm: tb, Hits: 1, Limit: 10}, under(10, 9, t0+1)},
		})
	})
}

func TestDrainOverLimitSteps(t *testing.T) {
	t.Parallel()
	for _, alg := range []limit.Algorithm{tb, lb} {
		r := func(hits int64) Request {
			return Request{Algorithm: alg, Hits: hits, Limit: 10, Duration: 30_000, Behavior: limit.DrainOverLimit}
		}
		reset := func(rem int64) int64 {
			if alg == tb {
				return t0 + 30_000
			}
			return t0 + (10-rem)*3000
		}
		t.Run(alg.String(), func(t *testing.T) {
			play(t, []step{
				{"report before", 0, r(0), under(10, 10, reset(10))},
				{"first hit", 0, r(1), under(10, 9, reset(9))},
				{"over limit hit drains", 0, r(100), over(10, 0, reset(9))},
				{"report after", 0, r(0), under(10, 0, reset(0))},
			})
		})
	}
}

func TestChangeLimitAndReset(t *testing.T) {
	t.Parallel()
	r := func(alg limit.Algorithm, lim int64, b limit.Behavior) Request {
		return Request{Algorithm: alg, Hits: 1, Limit: lim, Duration: 9000, Behavior: b}
	}
	play(t, []step{
		{"99", 0, r(tb, 100, 0), under(100, 99, t0+9000)},
		{"98", 1, r(tb, 100, 0), under(100, 98, t0+9000)},
		{"limit 10: 98-90-1", 2, r(tb, 10, 0), under(10, 7, t0+9000)},
		{"6", 3, r(tb, 10, 0), under(10, 6, t0+9000)},
		{"limit 200: 6+190-1", 4, r(tb, 200, 0), under(200, 195, t0+9000)},
		{"leaky replaces the token key", 5, r(lb, 100, 0), under(100, 99, t0+5+90)},
		{"leaky limit 10: capped at the burst", 6, r(lb, 10, 0), under(10, 9, t0+6+900)},
		{"8", 7, r(lb, 10, 0), under(10, 8, t0+7+1800)},
	})
	play(t, []step{
		{"99", 0, r(tb, 100, 0), under(100, 99, t0+9000)},
		{"98", 0, r(tb, 100, 0), under(100, 98, t0+9000)},
		{"reset answers a full window, hit not applied", 0, r(tb, 100, limit.Reset), under(100, 100, 0)},
		{"after the reset", 0, r(tb, 100, 0), under(100, 99, t0+9000)},
	})
	play(t, []step{
		{"leaky 9", 0, r(lb, 10, 0), under(10, 9, t0+900)},
		{"leaky 8", 0, r(lb, 10, 0), under(10, 8, t0+1800)},
		{"leaky reset refills, then applies the hit", 0, r(lb, 10, limit.Reset), under(10, 9, t0+900)},
	})
	play(t, []step{
		{"token window of 9 s", 0, r(tb, 10, 0), under(10, 9, t0+9000)},
		{"duration 2 s: the window ended, starts over", 3000,
			Request{Algorithm: tb, Hits: 1, Limit: 10, Duration: 2000}, under(10, 9, t0+5000)},
	})
}

// leakySteps returns a maker of steps of r, each sleep ms after the one
// before; the reset time is gubernator's, created_at + (limit − remaining)
// × duration/limit.
func leakySteps(r Request) func(name string, sleep, hits, rem int64, over bool) step {
	at := int64(0)
	return func(name string, sleep, hits, rem int64, over bool) step {
		q := r
		q.Hits = hits
		st := step{name: name, at: at, req: q, want: Response{Over: over, Limit: r.Limit, Remaining: rem,
			ResetTime: t0 + at + (r.Limit-rem)*(r.Duration/r.Limit)}}
		at += sleep
		return st
	}
}

func TestLeakyBucketSteps(t *testing.T) {
	t.Parallel()
	s := leakySteps(Request{Algorithm: lb, Limit: 10, Duration: 30_000})
	play(t, []step{
		s("first hit", 1000, 1, 9, false),
		s("second hit; no leak", 1000, 1, 8, false),
		s("third hit; no leak", 1500, 1, 7, false),
		s("leaked one hit 3 s after the first", 3000, 0, 8, false),
		s("3 s later another", 0, 0, 9, false),
		s("max out", 0, 9, 0, false),
		s("over", 3000, 1, 0, true),
		s("leaked 1", 60_000, 0, 1, false),
		s("full again", 60_000, 0, 10, false),
		s("use it all", 29_000, 10, 0, false),
		s("9 leaked 29 s later", 3000, 9, 0, false),
		s("one more leaked", 1000, 1, 0, false),
	})
}

func TestLeakyBucketWithBurstSteps(t *testing.T) {
	t.Parallel()
	s := leakySteps(Request{Algorithm: lb, Limit: 10, Burst: 20, Duration: 30_000})
	play(t, []step{
		s("first hit", 1000, 1, 19, false),
		s("second hit; no leak", 1000, 1, 18, false),
		s("third hit; no leak", 1500, 1, 17, false),
		s("leaked one", 3000, 0, 18, false),
		s("leaked another", 0, 0, 19, false),
		s("max out", 0, 19, 0, false),
		s("over", 3000, 1, 0, true),
		s("leaked 1", 60_000, 0, 1, false),
		s("full: the burst", 1000, 0, 20, false),
	})
}

func TestLeakyBucketOtherSteps(t *testing.T) {
	t.Parallel()
	t.Run("negative hits", func(t *testing.T) {
		r := func(hits int64) Request { return Request{Algorithm: lb, Hits: hits, Limit: 10, Duration: 30_000} }
		play(t, []step{
			{"9", 0, r(1), under(10, 9, t0+3000)},
			{"refund", 0, r(-1), under(10, 10, t0)},
			{"empty", 0, r(10), under(10, 0, t0+30_000)},
			{"refund on empty", 0, r(-1), under(10, 1, t0+27_000)},
		})
	})
	t.Run("request more than available", func(t *testing.T) {
		r := func(hits int64) Request { return Request{Algorithm: lb, Hits: hits, Limit: 2000, Duration: 1000} }
		play(t, []step{
			{"half", 0, r(1000), under(2000, 1000, t0)},
			{"too many", 0, r(1500), over(2000, 1000, t0)},
			{"500", 0, r(500), under(2000, 500, t0)},
			{"400", 0, r(400), under(2000, 100, t0)},
			{"100", 0, r(100), under(2000, 0, t0)},
			{"over", 0, r(1), over(2000, 0, t0)},
		})
	})
	t.Run("division: rate 0.5 ms per hit", func(t *testing.T) {
		r := func(hits int64) Request { return Request{Algorithm: lb, Hits: hits, Limit: 2000, Duration: 1000} }
		play(t, []step{{"1999", 0, r(1), under(2000, 1999, t0)}, {"1899", 0, r(100), under(2000, 1899, t0)}})
	})
	t.Run("more than the burst on a new key", func(t *testing.T) {
		r := func(hits int64) Request { return Request{Algorithm: lb, Hits: hits, Limit: 10, Duration: 30_000} }
		play(t, []step{{"refused, empty", 0, r(11), over(10, 0, t0+30_000)}, {"still empty", 0, r(1), over(10, 0, t0+30_000)}})
	})
	t.Run("gregorian minutes", func(t *testing.T) {
		r := func(hits int64) Request {
			return Request{Algorithm: lb, Hits: hits, Limit: 60, Duration: limit.GregorianMinutes, Behavior: limit.Gregorian}
		}
		play(t, []step{
			// a new key's rate is duration/limit = 0: reset_time is created_at
			{"first hit", 0, r(1), under(60, 59, t0)},
			{"second hit; no leak", 500, r(1), under(60, 58, t0+500+2000)},
			{"third hit; one leaked", 1700, r(1), under(60, 58, t0+1700+2000)},
		})
	})
	t.Run("limit 0 and duration 0", func(t *testing.T) {
		play(t, []step{{"limit 0", 0, Request{Algorithm: lb, Hits: 1, Duration: 10000}, over(0, 0, t0)}})
		r := Request{Algorithm: lb, Hits: 1, Limit: 10}
		play(t, []step{{"duration 0", 0, r, under(10, 9, t0)}, {"no leak at rate 0, expired 1 ms later", 1, r, under(10, 9, t0+1)}})
	})
}

func TestCreatedAt(t *testing.T) {
	t.Parallel()
	// created_at anchors leaks; now decides expiry.
	var it Item
	r := Request{Algorithm: lb, Hits: 10, Limit: 10, Duration: 30_000, CreatedAt: t0}
	Take(&it, t0, r)
	r.Hits, r.CreatedAt = 0, t0+6000
	if got, want := Take(&it, t0, r), under(10, 2, t0+6000+8*3000); got != want {
		t.Errorf("Take(created_at t0+6s) = %+v, want %+v", got, want)
	}
	if got := Take(&it, t0+30_001, Request{Algorithm: lb, Limit: 10, Duration: 30_000, CreatedAt: t0 + 6000}); got.Remaining != 10 {
		t.Errorf("Take after expiry by now = %+v, want a full bucket", got)
	}
}

func TestGregorianEnds(t *testing.T) {
	t.Parallel()
	at := time.Date(2024, 2, 10, 11, 20, 10, 5e6, time.UTC).UnixMilli()
	ms := func(y int, m time.Month, d, h, mi int) int64 {
		return time.Date(y, m, d, h, mi, 0, 0, time.UTC).UnixMilli() - 1
	}
	for _, c := range []struct {
		unit int64
		end  int64
	}{
		{limit.GregorianMinutes, ms(2024, 2, 10, 11, 21)},
		{limit.GregorianHours, ms(2024, 2, 10, 12, 0)},
		{limit.GregorianDays, ms(2024, 2, 11, 0, 0)},
		{limit.GregorianMonths, ms(2024, 3, 1, 0, 0)},
		{limit.GregorianYears, ms(2025, 1, 1, 0, 0)},
	} {
		if got := gregorianEnd(at, c.unit); got != c.end {
			t.Errorf("gregorianEnd(%d, unit %d) = %d, want %d", at, c.unit, got, c.end)
		}
	}
	if got := gregorianLength(at, limit.GregorianDays); got != 86_400_000 {
		t.Errorf("gregorianLength(days) = %d", got)
	}
}
