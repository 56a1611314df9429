package window

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/shardlimiter/shardlimiter/limit"
)

// The reference of calendar windows, written with package time.

// refCalendarStart returns the start of the calendar window containing t.
func refCalendarStart(t int64, c limit.Calendar) time.Time {
	tm := time.Unix(0, t).UTC()
	y, m, d := tm.Date()
	switch c {
	case limit.CalendarWeek:
		back := (int(tm.Weekday()) + 6) % 7 // days since Monday
		return time.Date(y, m, d-back, 0, 0, 0, 0, time.UTC)
	case limit.CalendarMonth:
		return time.Date(y, m, 1, 0, 0, 0, 0, time.UTC)
	}
	return time.Date(y, 1, 1, 0, 0, 0, 0, time.UTC)
}

// refCalendarEnd returns the end of the calendar window containing t.
func refCalendarEnd(t int64, c limit.Calendar) int64 {
	s := refCalendarStart(t, c)
	switch c {
	case limit.CalendarWeek:
		return s.AddDate(0, 0, 7).UnixNano()
	case limit.CalendarMonth:
		return s.AddDate(0, 1, 0).UnixNano()
	}
	return s.AddDate(1, 0, 0).UnixNano()
}

// refCalendarLocate is refLocate for FIXED_WINDOW when the stored window or
// the rule (period p, calendar c) has a calendar: the counts belong to
// the first window of the rule ending at or after the stored slot's start.
func refCalendarLocate(s refWindow, now, p int64, c limit.Calendar) (end, cur int64) {
	end = now - now%p + p
	if c != limit.NoCalendar {
		end = refCalendarEnd(now, c)
	}
	if s.cur == 0 {
		return end, 0
	}
	g := refSlotExp(p)
	if refSlotExp(s.period) != g {
		return end, 0
	}
	lo := s.end >> g << g
	se := (lo + p - 1) / p * p
	if c != limit.NoCalendar {
		se = lo
		if refCalendarStart(lo, c).UnixNano() != lo {
			se = refCalendarEnd(lo, c)
		}
	}
	switch {
	case se == end:
		return end, s.cur
	case se > end:
		return se, s.cur
	}
	return end, 0
}

func utc(y int, m time.Month, d int) int64 {
	return time.Date(y, m, d, 0, 0, 0, 0, time.UTC).UnixNano()
}

var (
	perMonth = limit.Rule{Algorithm: limit.FixedWindow, Limit: 10, Period: limit.CalendarMonth.Period(), Calendar: limit.CalendarMonth}
	perYear  = limit.Rule{Algorithm: limit.FixedWindow, Limit: 10, Period: limit.CalendarYear.Period(), Calendar: limit.CalendarYear}
	perWeek  = limit.Rule{Algorithm: limit.FixedWindow, Limit: 10, Period: limit.CalendarWeek.Period(), Calendar: limit.CalendarWeek}
	hour     = int64(time.Hour)
	dayNs    = 24 * hour
)

// TestFixedCalendarMonth: a month resets on the 1st at 00:00 UTC, however
// long the month, leap Februaries included.
func TestFixedCalendarMonth(t *testing.T) {
	t.Parallel()
	jan31, feb1, feb29, mar1, apr1 := utc(2024, 1, 31), utc(2024, 2, 1), utc(2024, 2, 29), utc(2024, 3, 1), utc(2024, 4, 1)
	runSteps(t, fixedImpls(), perMonth, []step{
		{at: "jan31", now: jan31, hits: 10, want: ok(0, feb1)},
		{at: "feb1-1ns", now: feb1 - 1, hits: 1, want: no(0, feb1, 1)},
		{at: "feb1", now: feb1, hits: 4, want: ok(6, mar1)},
		// 2024 is a leap year: February has 29 days.
		{at: "feb29 23:00", now: feb29 + 23*hour, hits: 6, want: ok(0, mar1)},
		{at: "feb29 23:00", now: feb29 + 23*hour, hits: 1, want: no(0, mar1, time.Hour)},
		{at: "mar1", now: mar1, hits: 3, want: ok(7, apr1)},
		// Skipping a month: the March counts have expired in April.
		{at: "apr1+1d", now: apr1 + dayNs, hits: 10, want: ok(0, utc(2024, 5, 1))},
		{at: "apr1+1d", now: apr1 + dayNs, hits: 11, want: no(0, utc(2024, 5, 1), limit.Never)},
	})
}

// TestFixedCalendarNonLeapFebruary: February 2100 has 28 days (a century
// year not divisible by 400), 2000's had 29.
func TestFixedCalendarNonLeapFebruary(t *testing.T) {
	t.Parallel()
	runSteps(t, fixedImpls(), perMonth, []step{
		{at: "2100-02-28", now: utc(2100, 2, 28), hits: 10, want: ok(0, utc(2100, 3, 1))},
		{at: "2100-03-01", now: utc(2100, 3, 1), hits: 10, want: ok(0, utc(2100, 4, 1))},
		{at: "2000-02-29", now: utc(2000, 2, 29), hits: 10, key: "y2k", want: ok(0, utc(2000, 3, 1))},
	})
}

// TestFixedCalendarYear: a year resets on January 1st 00:00 UTC; the
// window of a leap year is 366 days long.
func TestFixedCalendarYear(t *testing.T) {
	t.Parallel()
	y2024, y2025, y2026 := utc(2024, 1, 1), utc(2025, 1, 1), utc(2026, 1, 1)
	runSteps(t, fixedImpls(), perYear, []step{
		{at: "2024-01-01", now: y2024, hits: 3, want: ok(7, y2025)},
		{at: "2024-12-31 23:00", now: y2025 - hour, hits: 7, want: ok(0, y2025)},
		{at: "2024-12-31 23:00", now: y2025 - hour, hits: 1, want: no(0, y2025, time.Hour)},
		{at: "2025-01-01", now: y2025, hits: 1, want: ok(9, y2026)},
		// The clock steps back a day: the 2025 window stays.
		{at: "2024-12-31", now: y2025 - dayNs, hits: 9, want: ok(0, y2026)},
		{at: "2024-12-31", now: y2025 - dayNs, hits: 1, want: no(0, y2026, time.Duration(y2026-y2025+dayNs))},
	})
}

// TestFixedCalendarWeek: ISO weeks start on Monday 00:00 UTC; 2026-01-01
// is a Thursday, in the week of Monday 2025-12-29.
func TestFixedCalendarWeek(t *testing.T) {
	t.Parallel()
	mon, nextMon := utc(2025, 12, 29), utc(2026, 1, 5)
	runSteps(t, fixedImpls(), perWeek, []step{
		{at: "Sun 2025-12-28 23:00", now: mon - hour, hits: 10, want: ok(0, mon)},
		{at: "Mon 2025-12-29", now: mon, hits: 2, want: ok(8, nextMon)},
		{at: "Thu 2026-01-01", now: utc(2026, 1, 1), hits: 8, want: ok(0, nextMon)},
		{at: "Sun 2026-01-04 12:00", now: nextMon - 12*hour, hits: 1, want: no(0, nextMon, 12*time.Hour)},
		{at: "Mon 2026-01-05", now: nextMon, hits: 10, want: ok(0, utc(2026, 1, 12))},
	})
}

// TestFixedCalendarRuleChange: calendar windows and periods from 6.5 days
// up share one slot octave, so a rule change maps the counts as "Window
// identity" (slot.go) says: into the window of the new rule that overlaps
// the stored one. That is conservative: after a year's window, a month
// rule keeps the year's counts until the year ends.
func TestFixedCalendarRuleChange(t *testing.T) {
	t.Parallel()
	jan15, feb1, y2026 := utc(2025, 1, 15), utc(2025, 2, 1), utc(2026, 1, 1)
	runSteps(t, fixedImpls(), perMonth, []step{
		{at: "2025-01-15", now: jan15, hits: 6, want: ok(4, feb1)},
		{at: "2025-01-15", now: jan15, hits: 4, rule: &perYear, want: ok(0, y2026)},
		{at: "2025-02-01", now: feb1, hits: 1, want: no(0, y2026, time.Duration(y2026-feb1))},
		{at: "2026-01-01", now: y2026, hits: 10, want: ok(0, utc(2026, 2, 1))},
	})
}

// TestFixedCalendarEquivalence runs random takes with calendar and plain
// rules of the same slot octave against the reference.
func TestFixedCalendarEquivalence(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(13, 2026))
	rules := []limit.Rule{perWeek, perMonth, perYear,
		{Algorithm: limit.FixedWindow, Limit: 10, Period: 7 * 24 * time.Hour},
		{Algorithm: limit.FixedWindow, Limit: 3, Period: 30 * 24 * time.Hour},
		*with(perMonth, func(r *limit.Rule) { r.Limit = 40000 }),
		*with(perYear, func(r *limit.Rule) { r.Behavior = limit.CountRejected }),
	}
	for round := range 200 {
		impls := fixedImpls()
		ls := make([]limit.Limiter, len(impls))
		for i, im := range impls {
			ls[i] = im.new()
		}
		now := utc(2023, 12, 20) + rng.Int64N(40*dayNs)
		for i := range 300 {
			switch x := rng.IntN(10); {
			case x < 6:
				now += rng.Int64N(3 * dayNs)
			case x < 8:
				now += rng.Int64N(40 * dayNs)
			default:
				now -= rng.Int64N(10 * dayNs)
			}
			r := rules[rng.IntN(len(rules))]
			hits := randomHits(rng, r.Limit)
			key := []string{"a", "b"}[rng.IntN(2)]
			want := ls[len(ls)-1].Take(key, now, r, hits)
			for j, l := range ls[:len(ls)-1] {
				if got := l.Take(key, now, r, hits); got != want {
					t.Fatalf("round %d op %d %s: Take(%q, %v, %v/%v, %d) = %+v, reference %+v",
						round, i, impls[j].name, key, time.Unix(0, now).UTC(), r.Calendar, time.Duration(r.Period), hits, got, want)
				}
			}
		}
	}
}

// TestFixedCalendarSweep: a key is kept while its month can still be
// seen and swept once no rule can map its counts to a current window.
func TestFixedCalendarSweep(t *testing.T) {
	t.Parallel()
	for _, im := range fixedImpls() {
		l := im.new()
		jan15, feb1 := utc(2025, 1, 15), utc(2025, 2, 1)
		l.Take("k", jan15, perMonth, 5)
		if n := l.Sweep(feb1-1, 100); n != 0 || l.Len() != 1 {
			t.Fatalf("%s: Sweep(feb1-1ns) removed %d, Len %d; want 0, 1", im.name, n, l.Len())
		}
		if got := l.Take("k", feb1-1, perMonth, 0); got != ok(5, feb1) {
			t.Fatalf("%s: Take(k, feb1-1ns, 0) = %+v, want %+v", im.name, got, ok(5, feb1))
		}
		if n := l.Sweep(feb1+400*dayNs, 100); n != 1 || l.Len() != 0 {
			t.Fatalf("%s: Sweep(feb1+400d) removed %d, Len %d; want 1, 0", im.name, n, l.Len())
		}
	}
}
