package bucket

import (
	"fmt"
	"testing"
	"time"

	"github.com/shardlimiter/shardlimiter/limit"
)

// t0 is the first named instant of every step table; the others are
// written t0+d and printed that way.
var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()

const (
	ms  = time.Millisecond
	sec = time.Second
)

// step is one call of a step table at instant t0+at.
type step struct {
	at   time.Duration
	hits int64
	b    limit.Behavior
	rule *limit.Rule // nil: the case's rule
	want limit.Decision
}

type stepCase struct {
	name  string
	rule  limit.Rule
	steps []step
}

// runSteps plays each case on a fresh limiter of each implementation.
func runSteps(t *testing.T, impls []impl, cases []stepCase) {
	t.Helper()
	for _, c := range cases {
		for _, im := range impls {
			t.Run(c.name+"/"+im.name, func(t *testing.T) {
				t.Parallel()
				l := im.new()
				const key = "account:42"
				for _, s := range c.steps {
					r := c.rule
					if s.rule != nil {
						r = *s.rule
					}
					r.Behavior = s.b
					if err := r.Validate(); err != nil {
						t.Fatalf("bad rule in the table: %v", err)
					}
					if got := l.Take(key, t0+int64(s.at), r, s.hits); got != s.want {
						t.Fatalf("Take(%q, %s, %d) = %+v, want %+v", key, instant(s.at), s.hits, got, s.want)
					}
				}
			})
		}
	}
}

func instant(d time.Duration) string {
	if d < 0 {
		return fmt.Sprintf("t0-%v", -d)
	}
	return fmt.Sprintf("t0+%v", d)
}

// ok is an admitted decision; no a rejected one. reset is relative to t0.
func ok(remaining int64, reset time.Duration) limit.Decision {
	return limit.Decision{Allowed: true, Remaining: remaining, ResetAt: t0 + int64(reset)}
}

func no(remaining int64, reset, retry time.Duration) limit.Decision {
	return limit.Decision{Remaining: remaining, ResetAt: t0 + int64(reset), RetryAfter: retry}
}

func TestTokenBucketSteps(t *testing.T) {
	t.Parallel()
	perSecond := limit.Rule{Limit: 10, Period: sec} // T = 100ms, capacity 10
	perTenSeconds := limit.Rule{Limit: 10, Period: 10 * sec}
	doubleBurst := limit.Rule{Limit: 10, Period: sec, Burst: 20}
	runSteps(t, tokenImpls, []stepCase{
		{"burst then refill", perSecond, []step{
			{at: 0, hits: 10, want: ok(0, 1*sec)},
			{at: 0, hits: 1, want: no(0, 1*sec, 100*ms)},
			{at: 100 * ms, hits: 1, want: ok(0, 1100*ms)},
			{at: 350 * ms, hits: 3, want: no(2, 1100*ms, 50*ms)},
			{at: 400 * ms, hits: 3, want: ok(0, 1400*ms)},
			{at: 2400 * ms, hits: 0, want: ok(10, 2400*ms)},
		}},
		{"peek changes nothing", perSecond, []step{
			{at: 0, hits: 4, want: ok(6, 400*ms)},
			{at: 100 * ms, hits: 0, want: ok(7, 400*ms)},
			{at: 100 * ms, hits: 0, want: ok(7, 400*ms)},
			{at: 100 * ms, hits: 7, want: ok(0, 1100*ms)},
			// A peek answers as one hit would.
			{at: 100 * ms, hits: 0, want: no(0, 1100*ms, 100*ms)},
		}},
		{"reset forgets the key", perSecond, []step{
			{at: 0, hits: 10, want: ok(0, 1*sec)},
			{at: 0, hits: 1, b: limit.Reset, want: ok(9, 100*ms)},
			{at: 0, hits: 0, want: ok(9, 100*ms)},
		}},
		{"rejected hits do not count", perSecond, []step{
			{at: 0, hits: 10, want: ok(0, 1*sec)},
			{at: 0, hits: 5, want: no(0, 1*sec, 500*ms)},
			{at: 500 * ms, hits: 5, want: ok(0, 1500*ms)},
		}},
		{"count rejected is capped at one period of debt", perSecond, []step{
			{at: 0, hits: 10, want: ok(0, 1*sec)},
			{at: 0, hits: 5, b: limit.CountRejected, want: no(0, 1500*ms, 1*sec)},
			{at: 0, hits: 5, b: limit.CountRejected, want: no(0, 2*sec, 1500*ms)},
			{at: 0, hits: 1000, b: limit.CountRejected, want: no(0, 2*sec, limit.Never)},
			// Locked out for at most Period + T after the last hit.
			{at: 1100 * ms, hits: 1, want: ok(0, 2100*ms)},
		}},
		{"overdraft counts a report in full; a peek refuses only when overdrawn", perSecond, []step{
			{at: 0, hits: 10, want: ok(0, 1*sec)},
			// Exactly at capacity: not over, though one more hit would not fit.
			{at: 0, hits: 0, b: limit.Overdraft, want: ok(0, 1*sec)},
			{at: 0, hits: 0, want: no(0, 1*sec, 100*ms)},
			// A report of 5 is refused and charged.
			{at: 0, hits: 5, b: limit.Overdraft, want: no(0, 1500*ms, 1*sec)},
			{at: 0, hits: 0, b: limit.Overdraft, want: no(0, 1500*ms, 500*ms)},
			{at: 500 * ms, hits: 0, b: limit.Overdraft, want: ok(0, 1500*ms)},
			{at: 500 * ms, hits: 1, b: limit.Overdraft, want: no(0, 1600*ms, 200*ms)},
			// Charged up to one period beyond the capacity, as COUNT_REJECTED.
			{at: 500 * ms, hits: 1000, b: limit.Overdraft, want: no(0, 2500*ms, limit.Never)},
		}},
		{"hits beyond capacity never fit", perSecond, []step{
			{at: 0, hits: 11, want: no(10, 0, limit.Never)},
			{at: 0, hits: 10, want: ok(0, 1*sec)},
		}},
		{"retry after is exact", perSecond, []step{
			{at: 0, hits: 10, want: ok(0, 1*sec)},
			{at: 0, hits: 3, want: no(0, 1*sec, 300*ms)},
			{at: 300*ms - 1, hits: 3, want: no(2, 1*sec, 1)},
			{at: 300 * ms, hits: 3, want: ok(0, 1300*ms)},
		}},
		{"interval under a nanosecond is held to 1 ns", limit.Rule{Limit: 1_000_000_000, Period: ms}, []step{
			// A full bucket admits its whole capacity at once...
			{at: 0, hits: 1_000_000_000, want: ok(0, 1*sec)},
			{at: 0, hits: 1, want: no(0, 1*sec, 1)},
			// ...and refills at one hit per nanosecond, not 1000.
			{at: 1000, hits: 1000, want: ok(0, 1*sec+1000)},
			{at: 1000, hits: 1, want: no(0, 1*sec+1000, 1)},
		}},
		{"a fractional interval still admits the whole burst", limit.Rule{Limit: 7, Period: time.Hour}, []step{
			// 1h/7 is 514285714285.7 ns; the interval rounds up once, so
			// the seventh hit of a burst still fits.
			{at: 0, hits: 6, want: ok(1, 6*514285714286)},
			{at: 0, hits: 1, want: ok(0, 7*514285714286)},
			{at: 0, hits: 1, want: no(0, 7*514285714286, 514285714286)},
		}},
		{"rule change keeps the fraction in use", perSecond, []step{
			{at: 0, hits: 5, want: ok(5, 500*ms)},
			// Half of 10 per 10 s is 5 s of debt, not 0.5 s.
			{at: 0, rule: &perTenSeconds, want: ok(5, 5*sec)},
			{at: 0, want: ok(5, 500*ms)},
			{at: 0, rule: &doubleBurst, hits: 10, want: ok(0, 2*sec)},
			{at: 0, want: no(0, 1*sec, 100*ms)},
			{at: 1 * sec, rule: &perTenSeconds, hits: 0, want: ok(10, 1*sec)},
		}},
		{"clock backwards never admits a burst", perSecond, []step{
			{at: 10 * sec, hits: 10, want: ok(0, 11*sec)},
			{at: 9 * sec, hits: 1, want: no(0, 11*sec, 1100*ms)},
			{at: 0, hits: 0, want: no(0, 11*sec, 10100*ms)},
			{at: 10100 * ms, hits: 1, want: ok(0, 11100*ms)},
			{at: 20 * sec, hits: 10, want: ok(0, 21*sec)},
			{at: 19500 * ms, hits: 1, want: no(0, 21*sec, 600*ms)},
		}},
	})
}
