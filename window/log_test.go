package window

import (
	"testing"
	"time"

	"github.com/shardlimiter/shardlimiter/limit"
)

// logRule is 3 hits per sliding 10 s; l0 is any instant.
var (
	logRule = limit.Rule{Algorithm: limit.SlidingLog, Limit: 3, Period: 10 * time.Second}
	l0      = t0 + 7*sec
)

// TestLogBoundaryExact: a hit counts for exactly one period, to the
// nanosecond; no span of 10 s ever holds more than 3 admitted hits.
func TestLogBoundaryExact(t *testing.T) {
	t.Parallel()
	runSteps(t, logImpls(), logRule, []step{
		{at: "l0", now: l0, hits: 1, want: ok(2, l0+10*sec)},
		{at: "l0+1s", now: l0 + sec, hits: 1, want: ok(1, l0+11*sec)},
		{at: "l0+2s", now: l0 + 2*sec, hits: 1, want: ok(0, l0+12*sec)},
		{at: "l0+10s-1ns", now: l0 + 10*sec - 1, hits: 1, want: no(0, l0+12*sec, 1)},
		{at: "l0+10s", now: l0 + 10*sec, hits: 1, want: ok(0, l0+20*sec)},
		{at: "l0+10s", now: l0 + 10*sec, hits: 1, want: no(0, l0+20*sec, time.Second)},
		{at: "l0+10s", now: l0 + 10*sec, hits: 2, want: no(0, l0+20*sec, 2*time.Second)},
		{at: "l0+12s", now: l0 + 12*sec, hits: 2, want: ok(0, l0+22*sec)},
	})
}

func TestLogPeekResetNever(t *testing.T) {
	t.Parallel()
	reset := with(logRule, func(r *limit.Rule) { r.Behavior = limit.Reset })
	runSteps(t, logImpls(), logRule, []step{
		{at: "l0", now: l0, hits: 0, want: ok(3, l0)},
		{at: "l0", now: l0, hits: 4, want: no(3, l0, limit.Never)},
		{at: "l0", now: l0, hits: 3, want: ok(0, l0+10*sec)},
		{at: "l0+1s", now: l0 + sec, hits: 0, want: no(0, l0+10*sec, 9*time.Second)},
		{at: "l0+1s", now: l0 + sec, hits: 0, want: no(0, l0+10*sec, 9*time.Second)},
		{at: "l0+2s", now: l0 + 2*sec, hits: 1, rule: reset, want: ok(2, l0+12*sec)},
	})
}

// TestLogMinInterval: one take is one action, whatever its hits; actions
// are at least MinInterval apart.
func TestLogMinInterval(t *testing.T) {
	t.Parallel()
	spaced := with(logRule, func(r *limit.Rule) { r.MinInterval = time.Second })
	runSteps(t, logImpls(), *spaced, []step{
		{at: "l0", now: l0, hits: 1, want: ok(2, l0+10*sec)},
		{at: "l0+999ms", now: l0 + 999*int64(time.Millisecond), hits: 1, want: no(2, l0+10*sec, time.Millisecond)},
		{at: "l0+1s", now: l0 + sec, hits: 2, want: ok(0, l0+11*sec)},
		{at: "l0+2s", now: l0 + 2*sec, hits: 1, want: no(0, l0+11*sec, 8*time.Second)},
		{at: "l0+10s", now: l0 + 10*sec, hits: 1, want: ok(0, l0+20*sec)},
		// Both constraints: l0+1s leaves at l0+11s, when the interval ends.
		{at: "l0+10.5s", now: l0 + 10*sec + sec/2, hits: 0, want: no(0, l0+20*sec, time.Second/2)},
	})
	// A MinInterval longer than the period outlives the log.
	slow := limit.Rule{Algorithm: limit.SlidingLog, Limit: 3, Period: time.Second, MinInterval: 5 * time.Second}
	runSteps(t, logImpls(), slow, []step{
		{at: "l0", now: l0, hits: 1, want: ok(2, l0+sec)},
		{at: "l0+2s", now: l0 + 2*sec, hits: 1, want: no(3, l0+2*sec, 3*time.Second)},
		{at: "l0+5s-1ns", now: l0 + 5*sec - 1, hits: 1, want: no(3, l0+5*sec-1, 1)},
		{at: "l0+5s", now: l0 + 5*sec, hits: 1, want: ok(2, l0+6*sec)},
	})
}

// TestLogCountRejected: rejected hits are recorded too, replacing the
// oldest, so a client that keeps hammering stays out.
func TestLogCountRejected(t *testing.T) {
	t.Parallel()
	counting := with(logRule, func(r *limit.Rule) { r.Behavior = limit.CountRejected })
	runSteps(t, logImpls(), logRule, []step{
		{at: "l0", now: l0, hits: 3, want: ok(0, l0+10*sec)},
		{at: "l0+5s", now: l0 + 5*sec, hits: 3, rule: counting, want: no(0, l0+15*sec, 10*time.Second)},
		// Plain, the hits of l0 would have left at l0+10s.
		{at: "l0+10s", now: l0 + 10*sec, hits: 1, want: no(0, l0+15*sec, 5*time.Second)},
		{at: "l0+15s", now: l0 + 15*sec, hits: 1, want: ok(2, l0+25*sec)},
		{at: "l0+15s", now: l0 + 15*sec, hits: 4, rule: counting, want: no(0, l0+25*sec, limit.Never)},
	})
}

// TestLogClockBackwards: a now before the last recorded action counts at
// that action's instant.
func TestLogClockBackwards(t *testing.T) {
	t.Parallel()
	runSteps(t, logImpls(), logRule, []step{
		{at: "l0+5s", now: l0 + 5*sec, hits: 3, want: ok(0, l0+15*sec)},
		{at: "l0", now: l0, hits: 1, want: no(0, l0+15*sec, 15*time.Second)},
		{at: "-1ns", now: -1, hits: 1, want: no(0, l0+15*sec, time.Duration(l0+15*sec))},
		{at: "l0+15s-1ns", now: l0 + 15*sec - 1, hits: 1, want: no(0, l0+15*sec, 1)},
		{at: "l0+15s", now: l0 + 15*sec, hits: 3, want: ok(0, l0+25*sec)},
	})
	spaced := with(logRule, func(r *limit.Rule) { r.MinInterval = time.Second })
	runSteps(t, logImpls(), *spaced, []step{
		{at: "l0+5s", now: l0 + 5*sec, hits: 1, want: ok(2, l0+15*sec)},
		{at: "l0+4s", now: l0 + 4*sec, hits: 1, want: no(2, l0+15*sec, 2*time.Second)},
	})
}

// TestLogRuleChange: counted hits are measured against the new Limit and
// Period at once; hits recorded under a rule expire with that rule's
// Period (and MinInterval) at the latest.
func TestLogRuleChange(t *testing.T) {
	t.Parallel()
	runSteps(t, logImpls(), logRule, []step{
		{at: "l0", now: l0, hits: 3, want: ok(0, l0+10*sec)},
		{at: "l0+1s", now: l0 + sec, hits: 2, rule: with(logRule, func(r *limit.Rule) { r.Limit = 5 }), want: ok(0, l0+11*sec)},
		// 5 counted, limit 2: the 4th oldest (l0+1s) must leave.
		{at: "l0+2s", now: l0 + 2*sec, hits: 1, rule: with(logRule, func(r *limit.Rule) { r.Limit = 2 }), want: no(0, l0+11*sec, 9*time.Second)},
		{at: "l0+3s", now: l0 + 3*sec, hits: 1, rule: with(logRule, func(r *limit.Rule) { r.Period = time.Second }), want: ok(2, l0+4*sec)},
		{at: "l0+3s", now: l0 + 3*sec, hits: 3, want: no(2, l0+4*sec, time.Second)},
	})
}

// TestLogMemoryBounded: the log grows with the actions a key counts, one
// run per action whatever its hits, never beyond Limit runs, including
// under CountRejected hammering.
func TestLogMemoryBounded(t *testing.T) {
	t.Parallel()
	l := NewLog(testCfg)
	big := limit.Rule{Algorithm: limit.SlidingLog, Limit: 1000, Period: time.Minute}
	capOf := func(key string) int {
		e := l.t.Get(key, 0)
		e.Mu.Lock()
		defer e.Mu.Unlock()
		return len(e.State.buf)
	}
	l.Take("two", l0, big, 2)
	if got := capOf("two"); got != 1 {
		t.Fatalf("log of a key that made 1 action of 2 hits holds %d runs, want 1", got)
	}
	l.Take("two", l0+1, big, 500)
	if got := capOf("two"); got != 2 {
		t.Fatalf("log of a key that made 2 actions holds %d runs, want 2", got)
	}
	hammer := limit.Rule{Algorithm: limit.SlidingLog, Limit: 10, Period: time.Minute, Behavior: limit.CountRejected}
	for i := range int64(1000) {
		l.Take("hammer", l0+i*int64(time.Millisecond), hammer, 1+i%3)
	}
	if got := capOf("hammer"); got > 10 {
		t.Fatalf("log under CountRejected hammering holds %d runs, want <= Limit 10", got)
	}
	if d := l.Take("hammer", l0+int64(time.Second), hammer, 0); d.Remaining != 0 || d.Allowed {
		t.Fatalf("hammered key: peek = %+v, want full", d)
	}
}

// TestLogOverdraft: rejected hits are recorded too, and the log keeps the
// newest Limit+1 hits, enough to tell that the key is over its limit.
func TestLogOverdraft(t *testing.T) {
	t.Parallel()
	quota := with(logRule, func(r *limit.Rule) { r.Behavior = limit.Overdraft })
	runSteps(t, logImpls(), logRule, []step{
		{at: "l0", now: l0, hits: 3, rule: quota, want: ok(0, l0+10*sec)},
		{at: "l0+1s", now: l0 + sec, hits: 0, rule: quota, want: ok(0, l0+10*sec)},
		{at: "l0+5s", now: l0 + 5*sec, hits: 2, rule: quota, want: no(0, l0+15*sec, 10*time.Second)},
		// Over (4 of the 5 hits kept, all within the period) until the
		// hits of l0 leave.
		{at: "l0+6s", now: l0 + 6*sec, hits: 0, rule: quota, want: no(0, l0+15*sec, 4*time.Second)},
		{at: "l0+10s", now: l0 + 10*sec, hits: 0, rule: quota, want: ok(1, l0+15*sec)},
		{at: "l0+10s", now: l0 + 10*sec, hits: 1, rule: quota, want: ok(0, l0+20*sec)},
	})
}
