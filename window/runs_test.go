package window

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
	"unsafe"

	"github.com/shardlimiter/shardlimiter/limit"
)

// TestRunSize: a run is 16 bytes, and the entry bound keeps one key's log
// within 1 MiB.
func TestRunSize(t *testing.T) {
	t.Parallel()
	if got := unsafe.Sizeof(run{}); got != runBytes {
		t.Fatalf("unsafe.Sizeof(run{}) = %d, runBytes = %d", got, runBytes)
	}
	if got := limit.MaxLogEntries * runBytes; got > 1<<20 {
		t.Fatalf("MaxLogEntries × runBytes = %d, want <= 1 MiB", got)
	}
	if limit.MaxLogLimit > limit.MaxLogEntries {
		t.Fatalf("MaxLogLimit %d > MaxLogEntries %d: a valid rule could overflow the log", limit.MaxLogLimit, limit.MaxLogEntries)
	}
}

// TestRunsArithmetic: hits are counted by differences of hit numbers,
// which stay right when the numbering wraps around uint32; trim takes hits from
// the oldest run, in part if need be.
func TestRunsArithmetic(t *testing.T) {
	t.Parallel()
	q := runs{}
	q.push(5, 1, 100)
	q.buf[0].start, q.buf[0].end = math.MaxUint32-3, math.MaxUint32-2 // numbers about to wrap
	q.push(10, 5, 100)
	q.push(20, 3, 100)
	q.push(20, 1, 100) // the same instant joins the newest run
	q.push(30, 2, 100)
	q.trim(1)
	if q.n != 3 || q.hitsFrom(0) != 11 || q.hitsFrom(1) != 6 || q.hitsFrom(3) != 0 {
		t.Fatalf("after pushes of 5, 3+1, 2 hits: %d runs, hits from 0, 1, 3 = %d, %d, %d; want 3 runs, 11, 6, 0",
			q.n, q.hitsFrom(0), q.hitsFrom(1), q.hitsFrom(3))
	}
	for _, c := range []struct {
		from int
		h    int64
		want int
	}{{0, 1, 0}, {0, 5, 0}, {0, 6, 1}, {0, 9, 1}, {0, 10, 2}, {0, 11, 2}, {1, 1, 1}, {1, 4, 1}, {1, 5, 2}, {2, 2, 2}} {
		if got := q.holding(c.from, c.h); got != c.want {
			t.Errorf("holding(%d, %d) = %d, want %d", c.from, c.h, got, c.want)
		}
	}
	q.trim(7) // all 5 of t=10 and 2 of the 4 of t=20
	if q.n != 2 || q.at(0).t != 20 || q.hitsFrom(0) != 4 || q.hitsFrom(1) != 2 {
		t.Fatalf("after trim(7): %d runs, oldest at %d, hits %d, %d; want 2 runs, oldest at 20, 4, 2", q.n, q.at(0).t, q.hitsFrom(0), q.hitsFrom(1))
	}
	q.push(40, 3, 5) // 4 + 3 > 5: the 2 oldest give way, the t=20 run exactly
	if q.n != 2 || q.at(0).t != 30 || q.hitsFrom(0) != 5 {
		t.Fatalf("after push(40, 3, bound 5): %d runs, oldest at %d, hits %d; want 2 runs, oldest at 30, 5", q.n, q.at(0).t, q.hitsFrom(0))
	}
}

// TestLogRunPerAction: one take is one run, however many hits it carries.
// A flood of 1,000 checks of hits = Limit over a 366-day period (the
// memory budget's floods, docs/PERFORMANCE.md "A node-wide byte budget")
// holds 16 bytes per key, not 8 × Limit.
func TestLogRunPerAction(t *testing.T) { // not parallel: AllocsPerRun
	r := limit.Rule{Algorithm: limit.SlidingLog, Limit: limit.MaxLogLimit, Period: limit.MaxPeriod}
	var s logState
	allocs := testing.AllocsPerRun(100, func() {
		s = logState{}
		if d := s.take(t0, r, r.Limit); !d.Allowed {
			t.Fatalf("take(t0, %+v, %d) on a fresh key = %+v, want admitted", r, r.Limit, d)
		}
	})
	if allocs != 1 || s.heapBytes() != runBytes {
		t.Fatalf("a take of %d hits on a fresh key: %v allocs, heapBytes %d; want 1 alloc, %d bytes", r.Limit, allocs, s.heapBytes(), runBytes)
	}
	l := NewLog(testCfg)
	counting := r
	counting.Behavior = limit.CountRejected
	for i := range 1000 {
		l.Take("hot", t0+int64(i), counting, r.Limit)
		l.Take(string(rune('a'+i%26))+string(rune('a'+i/26)), t0, r, r.Limit)
	}
	total := int64(0)
	l.Range(func(key string) bool {
		e := l.t.Peek(key)
		e.Mu.Lock()
		total += e.State.heapBytes()
		e.Mu.Unlock()
		return true
	})
	if want := int64(l.Len()) * runBytes; total != want {
		t.Fatalf("%d keys after 2,000 takes of %d hits hold %d bytes, want %d (one run each)", l.Len(), r.Limit, total, want)
	}
}

// TestLogBufferBound: a key that makes Limit = MaxLogEntries actions of
// one hit grows its buffer by doubling to exactly MaxLogEntries runs (1
// MiB, the largest single allocation) and no further, and shrinks again
// once they expire.
func TestLogBufferBound(t *testing.T) {
	t.Parallel()
	r := limit.Rule{Algorithm: limit.SlidingLog, Limit: limit.MaxLogLimit, Period: time.Minute, Behavior: limit.CountRejected}
	var s logState
	peak := int64(0)
	for i := range int64(limit.MaxLogEntries + 100) {
		before := s.heapBytes()
		s.take(t0+i, r, 1)
		if grown := s.heapBytes(); grown != before {
			if grown > 1<<20 || before != 0 && grown != 2*before {
				t.Fatalf("take %d: buffer grew from %d to %d bytes, want doubling up to 1 MiB", i, before, grown)
			}
			peak = grown
		}
	}
	if peak != limit.MaxLogEntries*runBytes || s.n != limit.MaxLogEntries {
		t.Fatalf("after %d actions: %d runs in %d bytes, want %d runs in 1 MiB", limit.MaxLogEntries+100, s.n, peak, limit.MaxLogEntries)
	}
	s.take(t0+int64(time.Minute)+limit.MaxLogEntries+200, r, 1)
	if s.n != 1 || s.heapBytes() > keepSmall*runBytes {
		t.Fatalf("after the window passed: %d runs in %d bytes, want 1 run in <= %d", s.n, s.heapBytes(), keepSmall*runBytes)
	}
}

// TestLogCountRejectedPartialRun: under COUNT_REJECTED a rejected take
// pushes out the oldest hits, leaving part of a run.
func TestLogCountRejectedPartialRun(t *testing.T) {
	t.Parallel()
	five := limit.Rule{Algorithm: limit.SlidingLog, Limit: 5, Period: 10 * time.Second}
	counting := with(five, func(r *limit.Rule) { r.Behavior = limit.CountRejected })
	runSteps(t, logImpls(), five, []step{
		{at: "l0", now: l0, hits: 3, want: ok(2, l0+10*sec)},
		{at: "l0+1s", now: l0 + sec, hits: 2, want: ok(0, l0+11*sec)},
		// 2 of the 3 hits of l0 give way; the 2nd oldest left is at l0+1s.
		{at: "l0+2s", now: l0 + 2*sec, hits: 2, rule: counting, want: no(0, l0+12*sec, 9*time.Second)},
		// The 1 hit left of l0 has gone.
		{at: "l0+10s", now: l0 + 10*sec, hits: 1, want: ok(0, l0+20*sec)},
		{at: "l0+10s", now: l0 + 10*sec, hits: 0, want: no(0, l0+20*sec, time.Second)},
	})
}

// TestLogRunsMatchReference drives the log's state and the reference with
// random sequences of large takes (many hits per run, rules changing,
// COUNT_REJECTED trimming runs in part, clocks going back), requires
// identical decisions, checks the runs' invariants after every take, and
// now and then moves the state through its wire image, which must change
// no decision.
func TestLogRunsMatchReference(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(12, 16))
	limits := []int64{1, 4, 60, 1000}
	periods := []time.Duration{time.Millisecond, 20 * time.Millisecond, time.Second}
	for seq := range 40 {
		ref := newRefLog()
		var s logState
		rule := func() limit.Rule {
			r := limit.Rule{Algorithm: limit.SlidingLog, Limit: limits[rng.IntN(len(limits))], Period: periods[rng.IntN(len(periods))]}
			if rng.IntN(4) == 0 {
				r.MinInterval = time.Duration(rng.Int64N(int64(2 * time.Millisecond)))
			}
			if rng.IntN(2) == 0 {
				r.Behavior = limit.CountRejected
			}
			return r
		}
		r, now := rule(), t0
		for i := range 800 {
			if rng.IntN(40) == 0 {
				r = rule()
			}
			now += rng.Int64N(int64(r.Period)/8+1) - int64(r.Period)/40
			hits := rng.Int64N(r.Limit/3 + 2)
			if rng.IntN(10) == 0 {
				hits = r.Limit + rng.Int64N(2)
			}
			rr := r
			if rng.IntN(100) == 0 {
				rr.Behavior |= limit.Reset
			}
			if rng.IntN(20) == 0 {
				c := logState{}
				setLog(&c, imageOfLog(&s))
				s = c
			}
			got, want := s.take(now, rr, hits), ref.Take("k", now, rr, hits)
			if got != want {
				t.Fatalf("sequence %d, take %d: take(%d, %+v, %d) = %+v, reference %+v", seq, i, now, rr, hits, got, want)
			}
			checkRuns(t, &s)
		}
	}
}

// checkRuns fails t if s breaks an invariant of its runs.
func checkRuns(t *testing.T, s *logState) {
	t.Helper()
	im := imageOfLog(s)
	held := im.hits()
	switch {
	case s.n == 0 && s.idleAt != 0:
		t.Fatalf("a recorded key holds no run")
	case int(s.n) > len(s.buf) || len(s.buf) > limit.MaxLogEntries || s.heapBytes() != int64(len(s.buf))*runBytes:
		t.Fatalf("%d runs in a buffer of %d (%d bytes)", s.n, len(s.buf), s.heapBytes())
	case held != s.hitsFrom(0) || held > limit.MaxLogLimit:
		t.Fatalf("image holds %d hits, state %d", held, s.hitsFrom(0))
	case len(s.buf) > keepSmall && int(s.n) < len(s.buf)/4:
		t.Fatalf("%d runs in a buffer of %d: not shrunk", s.n, len(s.buf))
	}
	for i, r := range im.runs {
		if r.n < 1 || i > 0 && r.t <= im.runs[i-1].t {
			t.Fatalf("run %d of %+v: want >= 1 hit and a later instant than the run before", i, im.runs)
		}
	}
	var c logState
	setLog(&c, im)
	if back := imageOfLog(&c); !back.equal(im) || !slices.Equal(back.runs, im.runs) {
		t.Fatalf("imageOfLog(setLog(%+v)) = %+v", im, back)
	}
}
