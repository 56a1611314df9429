package leasing

import (
	"testing"
	"time"

	"github.com/shardlimiter/shardlimiter/limit"
)

func TestLeasable(t *testing.T) {
	for _, c := range []struct {
		r    limit.Rule
		want bool
	}{
		{limit.Rule{Algorithm: limit.TokenBucket}, true},
		{limit.Rule{Algorithm: limit.FixedWindow}, true},
		{limit.Rule{Algorithm: limit.SlidingWindow}, true},
		{limit.Rule{Algorithm: limit.TokenBucket, Warmup: time.Second}, false},
		{limit.Rule{Algorithm: limit.FixedWindow, Behavior: limit.CountRejected}, false},
		{limit.Rule{Algorithm: limit.TokenBucket, NoLease: true}, false},
		{limit.Rule{Algorithm: limit.LeakyBucket}, false},
		{limit.Rule{Algorithm: limit.SlidingLog}, false},
		{limit.Rule{Algorithm: limit.GubernatorTokenBucket}, false},
	} {
		if got := Leasable(c.r); got != c.want {
			t.Errorf("Leasable(%v, warm-up %v, behavior %v) = %v, want %v", c.r.Algorithm, c.r.Warmup, c.r.Behavior, got, c.want)
		}
	}
}

// A window's lease never outlives the window: its TTL is cut to the
// window's end, and none is made when less than the least is left.
func TestTTLEndsWithTheWindow(t *testing.T) {
	const sec = int64(time.Second)
	fw := limit.Rule{Algorithm: limit.FixedWindow, Limit: 10, Period: time.Second}
	tb := limit.Rule{Algorithm: limit.TokenBucket, Limit: 10, Period: time.Second}
	for _, c := range []struct {
		name    string
		r       limit.Rule
		now     int64
		ttl     time.Duration
		end     int64
		granted bool
	}{
		{"a bucket has no window", tb, 100*sec + 900_000_000, 500 * time.Millisecond, 0, true},
		{"early in a window: the whole TTL", fw, 100 * sec, 500 * time.Millisecond, 101 * sec, true},
		{"cut to the window's end", fw, 100*sec + 600_000_000, 400 * time.Millisecond, 101 * sec, true},
		{"too close to the end: none", fw, 100*sec + 800_000_000, 0, 101 * sec, false},
	} {
		ttl, end, ok := TTL(c.r, c.now, 500*time.Millisecond, 250*time.Millisecond)
		if ok != c.granted || end != c.end || ok && ttl != c.ttl {
			t.Errorf("%s: TTL = %v, end %d, %v; want %v, %d, %v", c.name, ttl, end, ok, c.ttl, c.end, c.granted)
		}
		if ok && c.end != 0 && c.now+int64(ttl) > c.end {
			t.Errorf("%s: the lease outlives its window", c.name)
		}
	}
	if !Creditable(0, 5) || !Creditable(10, 9) || Creditable(10, 10) {
		t.Error("Creditable: want credits without a window, and within it only")
	}
	if SameWindow(fw, 100*sec, 101*sec) || !SameWindow(fw, 100*sec, 101*sec-1) || !SameWindow(tb, 0, 5*sec) {
		t.Error("SameWindow: want windows told apart, and buckets always the same")
	}
}

func TestSize(t *testing.T) {
	if got := Size(100, 90, 100, 1); got != 30 {
		t.Errorf("a fair share of 90 among a lessee, the asker and the owner: %d, want 30", got)
	}
	if got := Size(100, 24, 100, 0); got != 0 {
		t.Errorf("under a quarter left: %d, want 0", got)
	}
	if got := Size(5, 90, 100, 0); got != 5 {
		t.Errorf("what the lessee wants when less than its share: %d, want 5", got)
	}
}
