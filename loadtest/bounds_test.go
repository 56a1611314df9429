package main

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/shardlimiter/shardlimiter/limit"
)

// t0 is a window boundary for every period used here (a multiple of 1 s).
const t0 = int64(1_700_000_000) * int64(time.Second)

const (
	ms = int64(time.Millisecond)
	s  = int64(time.Second)
)

func rule(a limit.Algorithm, lim int64, period time.Duration, burst int64) limit.Rule {
	return limit.Rule{Algorithm: a, Limit: lim, Period: period, Burst: burst}
}

func TestBoundSteps(t *testing.T) {
	t.Parallel()
	tb := rule(limit.TokenBucket, 10, time.Second, 0)
	for _, tc := range []struct {
		name string
		r    limit.Rule
		a, b int64
		want int64
	}{
		{"token bucket, one instant: the capacity", tb, t0, t0, 10},
		{"token bucket, 99 ms: no refill yet", tb, t0, t0 + 99*ms, 10},
		{"token bucket, 100 ms: one token", tb, t0, t0 + 100*ms, 11},
		{"token bucket, 1 s: capacity + limit", tb, t0, t0 + s, 20},
		{"token bucket, burst 3, 250 ms", rule(limit.TokenBucket, 10, time.Second, 3), t0, t0 + 250*ms, 5},
		{"token bucket, 1e9 per s over 1 ns", rule(limit.TokenBucket, limit.MaxLimit, time.Second, 0), t0, t0 + 1, limit.MaxLimit + 1},
		{"leaky bucket, strict spacing, one instant", rule(limit.LeakyBucket, 10, time.Second, 0), t0, t0, 1},
		{"leaky bucket, strict spacing, 1 s", rule(limit.LeakyBucket, 10, time.Second, 0), t0, t0 + s, 11},
		{"leaky bucket, queue 4, 1 s", rule(limit.LeakyBucket, 10, time.Second, 4), t0, t0 + s, 15},
		{"fixed window, inside one window", rule(limit.FixedWindow, 10, time.Second, 0), t0 + 500*ms, t0 + 700*ms, 10},
		{"fixed window, ends on the next boundary", rule(limit.FixedWindow, 10, time.Second, 0), t0 + 500*ms, t0 + s, 20},
		{"fixed window, 1.2 s over three windows", rule(limit.FixedWindow, 10, time.Second, 0), t0 + 900*ms, t0 + 2100*ms, 30},
		{"sliding window, as fixed", rule(limit.SlidingWindow, 10, time.Second, 0), t0 + 999*ms, t0 + s, 20},
		{"sliding log, one instant", rule(limit.SlidingLog, 10, time.Second, 0), t0, t0, 10},
		{"sliding log, just under a period", rule(limit.SlidingLog, 10, time.Second, 0), t0 + 1, t0 + s, 10},
		{"sliding log, exactly a period", rule(limit.SlidingLog, 10, time.Second, 0), t0, t0 + s, 20},
		{"sliding log, 2.5 periods", rule(limit.SlidingLog, 10, time.Second, 0), t0 + 300*ms, t0 + 2800*ms, 30},
	} {
		if got := bound(tc.r, tc.a, tc.b); got != tc.want {
			t.Errorf("%s: bound(%v, t0%+dms, t0%+dms) = %d, want %d", tc.name, tc.r.Algorithm, (tc.a-t0)/ms, (tc.b-t0)/ms, got, tc.want)
		}
	}
}

// at builds admitted-or-not attempts of one hit, answered 1 ms after they
// were sent, from send offsets in ms after t0.
func at(admitted bool, offsets ...int64) []attempt {
	var out []attempt
	for _, o := range offsets {
		out = append(out, attempt{send: t0 + o*ms, recv: t0 + o*ms + ms, hits: 1, admitted: admitted})
	}
	return out
}

func TestReplaySteps(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		r    limit.Rule
		at   []attempt
		want int64
	}{
		{"token bucket: 12 at once, capacity 10", rule(limit.TokenBucket, 10, time.Second, 0),
			at(false, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0), 10},
		{"token bucket: then one token 100 ms later", rule(limit.TokenBucket, 10, time.Second, 0),
			at(false, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 99, 100, 101), 11},
		{"leaky bucket, strict: one per 100 ms", rule(limit.LeakyBucket, 10, time.Second, 0),
			at(false, 0, 50, 99, 100, 150, 200), 3},
		{"fixed window: 3 per window, 5 then 10 attempts", rule(limit.FixedWindow, 3, time.Second, 0),
			at(false, 500, 600, 700, 800, 900, 1000, 1100, 1200, 1300, 1400, 1500, 1600, 1700, 1800, 1900), 6},
		{"sliding log: a hit leaves after exactly a period", rule(limit.SlidingLog, 2, time.Second, 0),
			at(false, 0, 100, 200, 1000, 1050, 1100), 4},
		{"sliding window's reference is the exact log", rule(limit.SlidingWindow, 2, time.Second, 0),
			at(false, 0, 100, 200, 1000, 1050, 1100), 4},
	} {
		if got := expected(tc.r, tc.at); got != tc.want {
			t.Errorf("%s: expected = %d, want %d", tc.name, got, tc.want)
		}
	}
	failed := at(false, 0, 0, 0)
	failed[0].fail = failRPC
	if got := expected(rule(limit.TokenBucket, 5, time.Second, 0), failed); got != 2 {
		t.Errorf("a failed attempt was replayed: expected = %d, want 2", got)
	}
}

func TestSpanViolationsNeedCertainty(t *testing.T) {
	t.Parallel()
	r := rule(limit.SlidingLog, 2, time.Second, 0)
	// Three admitted within 500 ms, each answered in 1 ms: certainly three
	// decisions within one period.
	if got := spanViolations(r, at(true, 0, 250, 500)); got != 1 {
		t.Errorf("3 admitted in 500 ms, limit 2: violations = %d, want 1", got)
	}
	// The third admitted at 999 ms but answered at 1000 ms: its decision may
	// have been a full period after the first send. Not certain.
	if got := spanViolations(r, at(true, 0, 500, 999)); got != 0 {
		t.Errorf("third answered a period after the first send: violations = %d, want 0", got)
	}
	if got := maxInPeriod(int64(time.Second), at(true, 0, 500, 999, 1000)); got != 3 {
		t.Errorf("maxInPeriod = %d, want 3 (0, 500, 999)", got)
	}
	slow := at(true, 0, 10, 20)
	slow[2].recv = slow[2].send + 2*s // a call slower than a period
	if got := spanViolations(r, slow); got != 0 {
		t.Errorf("slow third answer: violations = %d, want 0", got)
	}
}

// An exact limiter never exceeds the bound: the replays, driven by random
// traffic, stay within it for every algorithm.
func TestReplaysStayWithinTheBound(t *testing.T) {
	t.Parallel()
	rnd := rand.New(rand.NewPCG(5, 6))
	for range 300 {
		r := limit.Rule{
			Algorithm: limit.Algorithms()[rnd.IntN(5)], Limit: 1 + rnd.Int64N(20),
			Period: time.Duration(1+rnd.Int64N(2000)) * time.Millisecond,
		}
		if r.Algorithm == limit.TokenBucket || r.Algorithm == limit.LeakyBucket {
			r.Burst = rnd.Int64N(5)
		}
		var atts []attempt
		now := t0 + rnd.Int64N(s)
		for range 1 + rnd.IntN(300) {
			now += rnd.Int64N(int64(r.Period) / 4)
			atts = append(atts, attempt{send: now, recv: now + rnd.Int64N(ms), hits: 1 + rnd.Int64N(3)})
		}
		last := slices.MaxFunc(atts, func(a, b attempt) int { return int(a.recv - b.recv) })
		if e, b := expected(r, atts), bound(r, atts[0].send, last.recv); e > b {
			t.Fatalf("%+v over %d attempts: exact replay admitted %d > bound %d", r, len(atts), e, b)
		}
	}
}

func TestJudgeSumsOverAndUnder(t *testing.T) {
	t.Parallel()
	r := rule(limit.FixedWindow, 2, time.Second, 0)
	over := at(true, 100, 200, 300)                   // 3 admitted in one window: 1 over
	under := append(at(true, 100), at(false, 200)...) // 1 admitted where 2 fit: 1 under
	acc := judge(r, []string{"over", "under"}, [][]attempt{over, under})
	if acc.AdmittedHits != 4 || acc.BoundHits != 4 || acc.OverAdmittedHits != 1 || acc.UnderAdmitted != 1 {
		t.Fatalf("judge = %+v; want 4 admitted, bound 4, 1 over, 1 under", acc)
	}
	if acc.OverAdmittedPct != 25 || acc.UnderAdmittedPct != 25 {
		t.Errorf("over%%, under%% = %v, %v; want 25, 25", acc.OverAdmittedPct, acc.UnderAdmittedPct)
	}
}

func TestJudgeNamesTheWorstKeyAndCountsFailures(t *testing.T) {
	t.Parallel()
	r := rule(limit.FixedWindow, 2, time.Second, 0)
	fine := at(true, 100, 200)              // 2 of its bound 2
	worst := at(true, 100, 200, 300, 400)   // 4 of its bound 2
	failed := at(false, 100, 200, 300, 400) // none answered
	failed[0].fail, failed[1].fail, failed[2].fail, failed[3].fail = failItem, failRPC, failDeadline, failDeadline
	acc := judge(r, []string{"fine", "worst", "failed"}, [][]attempt{fine, worst, failed})
	if w := acc.WorstKey; w == nil || *w != (keyVerdict{Key: "worst", Admitted: 4, Bound: 2, OverPct: 100}) {
		t.Errorf("worst key = %+v, want worst: 4 admitted of bound 2, +100%%", w)
	}
	if acc.FailedChecks != 4 || acc.ItemErrors != 1 || acc.RPCErrors != 3 || acc.DeadlineExceeded != 2 {
		t.Errorf("failed, item, rpc, deadline = %d, %d, %d, %d; want 4, 1, 3, 2", acc.FailedChecks, acc.ItemErrors, acc.RPCErrors, acc.DeadlineExceeded)
	}
}
