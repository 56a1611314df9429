package limit

import (
	"math/rand/v2"
	"testing"
	"time"
)

func utc(y int, m time.Month, d, h int) int64 {
	return time.Date(y, m, d, h, 0, 0, 0, time.UTC).UnixNano()
}

// TestCalendarWindow checks the windows at named instants: month ends,
// leap days, year ends and ISO week starts.
func TestCalendarWindow(t *testing.T) {
	t.Parallel()
	tests := []struct {
		at         string
		c          Calendar
		now        int64
		start, end int64
	}{
		{"epoch (a Thursday)", CalendarWeek, 0, utc(1969, 12, 29, 0), utc(1970, 1, 5, 0)},
		{"Monday 00:00", CalendarWeek, utc(2024, 1, 1, 0), utc(2024, 1, 1, 0), utc(2024, 1, 8, 0)},
		{"Sunday 23:59:59.999999999", CalendarWeek, utc(2024, 1, 8, 0) - 1, utc(2024, 1, 1, 0), utc(2024, 1, 8, 0)},
		{"week across the year end", CalendarWeek, utc(2026, 1, 1, 12), utc(2025, 12, 29, 0), utc(2026, 1, 5, 0)},
		{"Jan 31 noon", CalendarMonth, utc(2025, 1, 31, 12), utc(2025, 1, 1, 0), utc(2025, 2, 1, 0)},
		{"Feb 1 00:00", CalendarMonth, utc(2025, 2, 1, 0), utc(2025, 2, 1, 0), utc(2025, 3, 1, 0)},
		{"leap day", CalendarMonth, utc(2024, 2, 29, 23), utc(2024, 2, 1, 0), utc(2024, 3, 1, 0)},
		{"Feb 2100 (not leap)", CalendarMonth, utc(2100, 2, 28, 23), utc(2100, 2, 1, 0), utc(2100, 3, 1, 0)},
		{"Dec 31 last ns", CalendarMonth, utc(2026, 1, 1, 0) - 1, utc(2025, 12, 1, 0), utc(2026, 1, 1, 0)},
		{"leap year", CalendarYear, utc(2024, 7, 1, 0), utc(2024, 1, 1, 0), utc(2025, 1, 1, 0)},
		{"Jan 1 00:00", CalendarYear, utc(2025, 1, 1, 0), utc(2025, 1, 1, 0), utc(2026, 1, 1, 0)},
		{"year 2000", CalendarYear, utc(2000, 12, 31, 23), utc(2000, 1, 1, 0), utc(2001, 1, 1, 0)},
	}
	for _, tt := range tests {
		start, end := tt.c.Window(tt.now)
		if start != tt.start || end != tt.end {
			t.Errorf("%v.Window(%s) = %v, %v, want %v, %v", tt.c, tt.at,
				time.Unix(0, start).UTC(), time.Unix(0, end).UTC(),
				time.Unix(0, tt.start).UTC(), time.Unix(0, tt.end).UTC())
		}
	}
}

// TestCalendarWindowMatchesTime compares Window with package time at
// random instants up to the year 2116.
func TestCalendarWindowMatchesTime(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(1, 2))
	for range 20000 {
		now := rng.Int64N(1 << 62)
		tm := time.Unix(0, now).UTC()
		y, m, d := tm.Date()
		want := map[Calendar][2]time.Time{
			CalendarMonth: {time.Date(y, m, 1, 0, 0, 0, 0, time.UTC), time.Date(y, m+1, 1, 0, 0, 0, 0, time.UTC)},
			CalendarYear:  {time.Date(y, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(y+1, 1, 1, 0, 0, 0, 0, time.UTC)},
		}
		back := (int(tm.Weekday()) + 6) % 7 // days since Monday
		monday := time.Date(y, m, d-back, 0, 0, 0, 0, time.UTC)
		want[CalendarWeek] = [2]time.Time{monday, monday.AddDate(0, 0, 7)}
		for c, w := range want {
			start, end := c.Window(now)
			if start != w[0].UnixNano() || end != w[1].UnixNano() {
				t.Fatalf("%v.Window(%v) = %v, %v, want %v, %v", c, tm,
					time.Unix(0, start).UTC(), time.Unix(0, end).UTC(), w[0], w[1])
			}
			if end-start > int64(c.Period()) {
				t.Fatalf("%v window at %v is %v, longer than Period %v", c, tm, time.Duration(end-start), c.Period())
			}
		}
	}
}

func TestCalendarValidate(t *testing.T) {
	t.Parallel()
	month := Rule{Algorithm: FixedWindow, Limit: 10, Period: 31 * 24 * time.Hour, Calendar: CalendarMonth}
	if err := month.Validate(); err != nil {
		t.Fatalf("month rule: %v", err)
	}
	for _, c := range []Calendar{CalendarWeek, CalendarYear} {
		r := Rule{Algorithm: FixedWindow, Limit: 10, Period: c.Period(), Calendar: c}
		if err := r.Validate(); err != nil {
			t.Errorf("%v rule: %v", c, err)
		}
	}
	bad := map[string]Rule{
		"unknown":      {Algorithm: FixedWindow, Limit: 10, Period: time.Hour, Calendar: 9},
		"token bucket": {Algorithm: TokenBucket, Limit: 10, Period: 31 * 24 * time.Hour, Calendar: CalendarMonth},
		"30-day month": {Algorithm: FixedWindow, Limit: 10, Period: 30 * 24 * time.Hour, Calendar: CalendarMonth},
	}
	for name, r := range bad {
		if err := r.Validate(); err == nil {
			t.Errorf("%s: Validate(%+v) = nil, want an error", name, r)
		}
	}
	if got := Calendar(9).String(); got != "CALENDAR(9)" {
		t.Errorf("Calendar(9).String() = %q", got)
	}
}
