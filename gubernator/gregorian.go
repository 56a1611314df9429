package gubernator

import (
	"time"

	"github.com/shardlimiter/shardlimiter/limit"
)

// DURATION_IS_GREGORIAN: the duration is a calendar unit, and a period
// ends with the unit that holds now, in UTC (gubernator uses the server's
// time zone; shardlimiter's is UTC). Weeks and unknown units were refused
// by limit.Rule.Validate.

// gregorianEnd is the last millisecond of the unit that holds now (Unix
// ms): 11:20:59.999 for minutes at 11:20:10.
func gregorianEnd(now int64, unit int64) int64 {
	t := time.UnixMilli(now).UTC()
	y, m, d := t.Date()
	var next time.Time
	switch unit {
	case limit.GregorianMinutes:
		next = t.Truncate(time.Minute).Add(time.Minute)
	case limit.GregorianHours:
		next = time.Date(y, m, d, t.Hour(), 0, 0, 0, time.UTC).Add(time.Hour)
	case limit.GregorianDays:
		next = time.Date(y, m, d+1, 0, 0, 0, 0, time.UTC)
	case limit.GregorianMonths:
		next = time.Date(y, m+1, 1, 0, 0, 0, 0, time.UTC)
	default: // limit.GregorianYears
		next = time.Date(y+1, time.January, 1, 0, 0, 0, 0, time.UTC)
	}
	return next.Add(-time.Nanosecond).UnixNano() / int64(time.Millisecond)
}

// gregorianLength is the length of the unit, the span a leaky bucket's
// limit leaks over. For months and years it is what gubernator computes:
// the unit's last instant in nanoseconds minus its first in milliseconds,
// a span so long that such a bucket leaks nothing before its period ends
// (kept: callers of gubernator see a monthly leaky bucket refill only when
// its month is over).
func gregorianLength(now int64, unit int64) int64 {
	t := time.UnixMilli(now).UTC()
	y, m, _ := t.Date()
	switch unit {
	case limit.GregorianMinutes:
		return time.Minute.Milliseconds()
	case limit.GregorianHours:
		return time.Hour.Milliseconds()
	case limit.GregorianDays:
		return (24 * time.Hour).Milliseconds()
	case limit.GregorianMonths:
		begin := time.Date(y, m, 1, 0, 0, 0, 0, time.UTC)
		return begin.AddDate(0, 1, 0).Add(-time.Nanosecond).UnixNano() - begin.UnixNano()/int64(time.Millisecond)
	default: // limit.GregorianYears
		begin := time.Date(y, time.January, 1, 0, 0, 0, 0, time.UTC)
		return begin.AddDate(1, 0, 0).Add(-time.Nanosecond).UnixNano() - begin.UnixNano()/int64(time.Millisecond)
	}
}
