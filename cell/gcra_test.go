package cell

import (
	"math"
	"testing"
	"time"

	"github.com/shardlimiter/shardlimiter/limit"
	"github.com/shardlimiter/shardlimiter/table"
)

func rule(maxBurst, count, periodS int64) limit.Rule {
	return limit.Rule{Algorithm: limit.Cell, Limit: count, Burst: maxBurst, Period: time.Duration(periodS) * time.Second}
}

// t0 is an arbitrary instant; the steps are named by their offset.
const t0 = int64(1_700_000_000) * int64(time.Second)

func at(ms int64) int64 { return t0 + ms*int64(time.Millisecond) }

// step is one call and redis-cell's unrounded answer to it.
type step struct {
	name                   string
	now, quantity          int64
	limited                bool
	remaining              int64
	resetAfter, retryAfter time.Duration // retry -1 ns: allowed, or never
}

const never = time.Duration(-1)

// TestThrottleRedisCellTable is redis-cell's own unit table (5 per second
// with max_burst 4), step by step, in its unrounded durations.
func TestThrottleRedisCellTable(t *testing.T) {
	q := QuotaOf(rule(4, 1, 1))
	steps := []step{
		{"larger than the limit, never", at(0), 6, true, 5, 0, never},
		{"first", at(0), 1, false, 4, time.Second, never},
		{"second", at(0), 1, false, 3, 2 * time.Second, never},
		{"third", at(0), 1, false, 2, 3 * time.Second, never},
		{"fourth", at(0), 1, false, 1, 4 * time.Second, never},
		{"fifth", at(0), 1, false, 0, 5 * time.Second, never},
		{"sixth refused", at(0), 1, true, 0, 5 * time.Second, time.Second},
		{"3s later", at(3000), 1, false, 2, 3 * time.Second, never},
		{"3.1s", at(3100), 1, false, 1, 3900 * time.Millisecond, never},
		{"4s", at(4000), 1, false, 1, 4 * time.Second, never},
		{"8s", at(8000), 1, false, 4, time.Second, never},
		{"9.5s", at(9500), 1, false, 4, time.Second, never},
		{"peek", at(9500), 0, false, 4, time.Second, never},
		{"two at once", at(9500), 2, false, 2, 3 * time.Second, never},
		{"five do not fit", at(9500), 5, true, 2, 3 * time.Second, 3 * time.Second},
	}
	var tat int64
	for _, s := range steps {
		var r Reply
		tat, r = q.Throttle(tat, s.now, s.quantity)
		want := Reply{Limited: s.limited, Limit: 5, Remaining: s.remaining, ResetAfter: int64(s.resetAfter), RetryAfter: int64(s.retryAfter)}
		if r != want {
			t.Fatalf("%s: Throttle(t%+dms, %d) = %+v, want %+v", s.name, (s.now-t0)/1e6, s.quantity, r, want)
		}
	}
}

// TestThrottleRedisCellE2E is redis-cell's end-to-end test (max_burst 0,
// 1 per 2 s) in the reply's rounded integers.
func TestThrottleRedisCellE2E(t *testing.T) {
	tb := NewTable(table.Config{})
	r := rule(0, 1, 2)
	for _, s := range []struct {
		name string
		now  int64
		want [5]int64
	}{
		{"allowed", at(0), [5]int64{0, 1, 0, -1, 2}},
		{"refused at once", at(0), [5]int64{1, 1, 0, 2, 2}},
		{"after retry_after", at(2000), [5]int64{0, 1, 0, -1, 2}},
	} {
		if got := reply5(tb.Take("user123", s.now, r, 1), 1); got != s.want {
			t.Fatalf("%s: CL.THROTTLE user123 0 1 2 at t%+dms = %v, want %v", s.name, (s.now-t0)/1e6, got, s.want)
		}
	}
}

func TestSecondsRounding(t *testing.T) {
	for _, c := range []struct {
		ns   int64
		want int64
	}{
		{-1, -1},
		{0, 0},
		{int64(500 * time.Microsecond), 0}, // no millisecond part: not rounded up
		{int64(time.Millisecond), 1},
		{int64(time.Second), 1},
		{int64(time.Second + time.Millisecond), 2},
		{int64(3900 * time.Millisecond), 4},
		{int64(2*time.Second + 999*time.Microsecond), 2},
	} {
		if got := Seconds(c.ns); got != c.want {
			t.Errorf("Seconds(%v) = %d, want %d", time.Duration(c.ns), got, c.want)
		}
	}
}

// TestIntervalTruncates: redis-cell truncates period/count (TOKEN_BUCKET
// rounds it up), and an interval under a microsecond makes its remaining
// a division by zero that Rust saturates.
func TestIntervalTruncates(t *testing.T) {
	if got := limit.CellInterval(3, time.Second); got != 333_333_333 {
		t.Fatalf("CellInterval(3, 1s) = %d, want 333333333", got)
	}
	q := QuotaOf(rule(2, 3, 1))
	tat, r := q.Throttle(0, at(0), 3)
	if r.Limited || r.Remaining != 0 {
		t.Fatalf("burst of 3 = %+v, want admitted with 0 left", r)
	}
	// One interval later (333,333,333 ns, not ...334) one more fits.
	if _, r = q.Throttle(tat, at(0)+333_333_333, 1); r.Limited {
		t.Fatalf("one interval later = %+v, want admitted", r)
	}
	fast := QuotaOf(rule(10, 2_000_000, 1)) // 500 ns per action
	if _, r = fast.Throttle(0, at(0), 1); r.Remaining != math.MaxInt64 {
		t.Fatalf("sub-microsecond interval: remaining = %d, want redis-cell's saturated %d", r.Remaining, int64(math.MaxInt64))
	}
}

// TestPeekOfEmptyBucketIsAllowed: redis-cell limits a peek only when the
// bucket is overdrawn (TOKEN_BUCKET would report it over the limit).
func TestPeekOfEmptyBucketIsAllowed(t *testing.T) {
	q := QuotaOf(rule(0, 1, 10))
	tat, _ := q.Throttle(0, at(0), 1)
	nt, r := q.Throttle(tat, at(0), 0)
	if r.Limited || r.Remaining != 0 || nt != tat {
		t.Fatalf("peek of an empty bucket = %+v (tat moved %d), want allowed, 0 left, tat kept", r, nt-tat)
	}
}

func TestTransferKeepsTheLaterTat(t *testing.T) {
	a, b := NewTable(table.Config{}), NewTable(table.Config{})
	r := rule(4, 1, 1)
	a.Take("k", at(0), r, 3)
	b.Take("k", at(0), r, 1)
	st, ok := a.Export("k", at(0))
	if !ok {
		t.Fatal("Export of a live key: not ok")
	}
	if err := b.Import("k", st, at(0), false); err != nil {
		t.Fatal(err)
	}
	if got := b.Take("k", at(0), r, 0); got.Remaining != 2 {
		t.Fatalf("after merge remaining = %d, want 2 (the state that consumed more)", got.Remaining)
	}
	if _, ok := a.Export("k", at(10_000)); ok {
		t.Fatal("Export of a key whose tat is past: ok, want a fresh key not moved")
	}
	if err := b.Import("k", []byte{9, 1}, at(0), false); err == nil {
		t.Fatal("Import of a bad state: nil error")
	}
}

func TestSweepRetiresPastKeys(t *testing.T) {
	tb := NewTable(table.Config{})
	tb.Take("k", at(0), rule(4, 1, 1), 1)
	if n := tb.Sweep(at(500), 100); n != 0 {
		t.Fatalf("Sweep while live removed %d", n)
	}
	if n := tb.Sweep(at(5000), 100); n != 1 {
		t.Fatalf("Sweep after the tat removed %d, want 1", n)
	}
}

// reply5 is the five integers the Redis protocol replies for d under a
// limit of limitN (package api/resp does the same).
func reply5(d limit.Decision, limitN int64) [5]int64 {
	limited, retry := int64(0), int64(-1)
	if !d.Allowed {
		limited = 1
		if d.RetryAfter != limit.Never {
			retry = int64(d.RetryAfter / time.Second)
		}
	}
	return [5]int64{limited, limitN, d.Remaining, retry, int64(d.Delay / time.Second)}
}
