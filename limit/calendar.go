package limit

import (
	"fmt"
	"time"
)

// Calendar makes a FIXED_WINDOW rule's windows real calendar periods in
// UTC instead of multiples of Period since the Unix epoch:
//
//   - CalendarWeek: ISO 8601 weeks, from Monday 00:00 UTC to the next Monday;
//   - CalendarMonth: from the 1st of a month 00:00 UTC to the 1st of the next;
//   - CalendarYear: from January 1st 00:00 UTC to the next January 1st.
//
// Months and years differ in length (28–31 days, 365 or 366), so such a
// rule's Period must be its calendar's longest window (Calendar.Period):
// the Limit is never spread over a longer span than Period says. The
// numeric values are wire values and must not change.
type Calendar uint8

const (
	NoCalendar    Calendar = 0 // windows are multiples of Period since the epoch
	CalendarWeek  Calendar = 1 // ISO weeks: Monday 00:00 UTC
	CalendarMonth Calendar = 2 // the 1st of each month, 00:00 UTC
	CalendarYear  Calendar = 3 // January 1st, 00:00 UTC
	numCalendars           = 4
)

const day = 24 * time.Hour

var calendarNames = [numCalendars]string{"NONE", "WEEK", "MONTH", "YEAR"}

// calendarPeriods are the longest windows of each calendar.
var calendarPeriods = [numCalendars]time.Duration{0, 7 * day, 31 * day, 366 * day}

// String returns the calendar's name, e.g. "MONTH"; "NONE" for NoCalendar.
func (c Calendar) String() string {
	if c < numCalendars {
		return calendarNames[c]
	}
	return fmt.Sprintf("CALENDAR(%d)", uint8(c))
}

// Period returns the longest window of the calendar (7, 31 or 366 days),
// which is the Period a rule with this calendar must have; 0 for
// NoCalendar or an unknown value.
func (c Calendar) Period() time.Duration {
	if c < numCalendars {
		return calendarPeriods[c]
	}
	return 0
}

// validateCalendar rejects a calendar that does not fit the rule.
func (r Rule) validateCalendar() error {
	switch {
	case r.Calendar == NoCalendar:
		return nil
	case r.Calendar >= numCalendars:
		return fmt.Errorf("unknown calendar %d", r.Calendar)
	case r.Algorithm != FixedWindow:
		return fmt.Errorf("calendar %v applies to FIXED_WINDOW only, not %v", r.Calendar, r.Algorithm)
	case r.Period != r.Calendar.Period():
		return fmt.Errorf("calendar %v needs duration_ms %d (its longest window), got %d",
			r.Calendar, r.Calendar.Period().Milliseconds(), r.Period.Milliseconds())
	}
	return nil
}

// Window returns the start and end (Unix ns, end exclusive) of the
// calendar window that contains now (Unix ns, at least 0). It reads no
// clock and makes no allocation. For NoCalendar it returns now, now.
func (c Calendar) Window(now int64) (start, end int64) {
	const nsDay = int64(day)
	days := now / nsDay
	switch c {
	case CalendarWeek:
		// 1970-01-01 was a Thursday: Monday-based weeks start 3 days
		// before multiples of 7 days since the epoch.
		s := (days+3)/7*7 - 3
		return s * nsDay, (s + 7) * nsDay
	case CalendarMonth:
		y, m, _ := civil(days)
		ny, nm := y, m+1
		if nm > 12 {
			ny, nm = y+1, 1
		}
		return daysFromCivil(y, m, 1) * nsDay, daysFromCivil(ny, nm, 1) * nsDay
	case CalendarYear:
		y, _, _ := civil(days)
		return daysFromCivil(y, 1, 1) * nsDay, daysFromCivil(y+1, 1, 1) * nsDay
	}
	return now, now
}

// daysFromCivil returns the days since 1970-01-01 of the proleptic
// Gregorian date y-m-d (y ≥ 0), after Howard Hinnant's public-domain
// "chrono-compatible low-level date algorithms" (eras of 400 years).
func daysFromCivil(y, m, d int64) int64 {
	if m <= 2 {
		y--
	}
	era := y / 400
	yoe := y - era*400                     // [0, 399]
	mp := (m + 9) % 12                     // March = 0
	doy := (153*mp+2)/5 + d - 1            // [0, 365]
	doe := yoe*365 + yoe/4 - yoe/100 + doy // [0, 146096]
	return era*146097 + doe - 719468
}

// civil is the inverse of daysFromCivil for days ≥ 0.
func civil(days int64) (y, m, d int64) {
	z := days + 719468
	era := z / 146097
	doe := z - era*146097
	yoe := (doe - doe/1460 + doe/36524 - doe/146096) / 365
	doy := doe - (365*yoe + yoe/4 - yoe/100)
	mp := (5*doy + 2) / 153
	d = doy - (153*mp+2)/5 + 1
	m = mp + 3
	if m > 12 {
		m -= 12
	}
	y = yoe + era*400
	if m <= 2 {
		y++
	}
	return y, m, d
}
