package bucket

import (
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/shardlimiter/shardlimiter/limit"
	"github.com/shardlimiter/shardlimiter/table"
)

// The fuzz targets run arbitrary valid rules and arbitrary operation
// sequences (ops, 4 bytes each: time step, hits, behavior, key and rule
// variant) through the optimized table and the reference, from an
// arbitrary start time. Each decision must satisfy the Decision contract,
// and the two implementations must agree.

func FuzzTokenBucket(f *testing.F) {
	f.Add(int64(10), int64(sec), int64(0), t0, []byte{0, 10, 0, 0, 1, 1, 2, 0, 255, 3, 16, 4})
	f.Add(int64(1_000_000_000), int64(ms), int64(5), int64(-1), []byte{4, 200, 2, 8, 130, 7, 0, 64})
	f.Add(int64(3), int64(700*ms), int64(9), int64(math.MaxInt64-5), []byte{127, 5, 3, 12, 128, 5, 2, 13})
	f.Fuzz(func(t *testing.T, lim, period, burst, start int64, ops []byte) {
		r := limit.Rule{Limit: lim, Period: time.Duration(period), Burst: burst}
		if r.Validate() != nil {
			t.Skip()
		}
		toggled := r
		toggled.Warmup = r.Period
		fuzzOps(t, NewTokenBucket(table.Config{MaxKeys: 64}), newRefTokenBucket(), r, toggled, start, ops)
	})
}

func FuzzWarmup(f *testing.F) {
	f.Add(int64(10), int64(sec), int64(1), int64(2*sec), t0, []byte{0, 10, 0, 0, 1, 1, 2, 0, 255, 3, 16, 4})
	f.Add(int64(1_000_000_000), int64(ms), int64(0), int64(1), int64(1), []byte{4, 200, 2, 8, 130, 7, 0, 64})
	f.Add(int64(1), int64(366*24*time.Hour), int64(0), int64(366*24*time.Hour), t0, []byte{127, 1, 3, 12, 128, 5, 2, 13})
	f.Fuzz(func(t *testing.T, lim, period, burst, warmup, start int64, ops []byte) {
		r := limit.Rule{Limit: lim, Period: time.Duration(period), Burst: burst, Warmup: time.Duration(warmup)}
		if warmup <= 0 || r.Validate() != nil {
			t.Skip()
		}
		toggled := r
		toggled.Warmup = 0
		fuzzOps(t, NewTokenBucket(table.Config{MaxKeys: 64}), newRefTokenBucket(), r, toggled, start, ops)
	})
}

func FuzzLeakyBucket(f *testing.F) {
	f.Add(int64(10), int64(sec), int64(2), t0, []byte{0, 10, 0, 0, 1, 1, 2, 0, 255, 3, 16, 4})
	f.Add(int64(1_000_000_000), int64(ms), int64(0), int64(-1), []byte{4, 200, 2, 8, 130, 7, 0, 64})
	f.Add(int64(3), int64(700*ms), int64(1_000_000_000), t0, []byte{127, 5, 3, 12, 128, 5, 2, 13})
	f.Fuzz(func(t *testing.T, lim, period, burst, start int64, ops []byte) {
		r := limit.Rule{Algorithm: limit.LeakyBucket, Limit: lim, Period: time.Duration(period), Burst: burst}
		if r.Validate() != nil {
			t.Skip()
		}
		deeper := r
		deeper.Burst = r.Burst*2 + 1
		if deeper.Validate() != nil {
			deeper = r
		}
		fuzzOps(t, NewLeakyBucket(table.Config{MaxKeys: 64}), newRefLeakyBucket(), r, deeper, start, ops)
	})
}

// fuzzOps plays ops on opt and ref under rule r and two variants: other,
// and r with a third of its limit (when valid).
func fuzzOps(t *testing.T, opt, ref limit.Limiter, r, other limit.Rule, start int64, ops []byte) {
	slower := r
	slower.Limit = r.Limit/3 + 1
	if slower.Validate() != nil {
		slower = r
	}
	rules := [4]limit.Rule{r, r, other, slower}
	// Longer sequences find nothing new and make minimizing slow.
	ops = ops[:min(len(ops), 256)]
	now := start
	for i := 0; i+4 <= len(ops); i += 4 {
		b0, b1, b2, b3 := ops[i], ops[i+1], ops[i+2], ops[i+3]
		step := int64(int8(b0)) * max(int64(r.Period)/32, 1)
		if b3&0x80 != 0 {
			step *= 1000
		}
		now = addSat(now, step)
		if b3&0x40 != 0 {
			if o, rf := opt.Sweep(now, 1<<20), ref.Sweep(now, 1<<20); o != rf {
				t.Fatalf("op %d: Sweep removed %d, reference %d", i/4, o, rf)
			}
		}
		rule := rules[b3>>2&3]
		if b2%16 == 0 {
			rule.Behavior |= limit.Reset
		}
		if b2&2 != 0 {
			rule.Behavior |= limit.CountRejected
		}
		if b2&4 != 0 {
			rule.Behavior |= limit.Overdraft
		}
		capacity := fuzzCapacity(rule)
		hits := int64(b1 >> 1 % 4)
		if b1&1 != 0 {
			hits = capacity * int64(b1) / 128
		}
		key := fmt.Sprint("k", b3%3)
		got := opt.Take(key, now, rule, hits)
		checkDecision(t, i/4, rule, capacity, clampNow(now), hits, got)
		if want := ref.Take(key, now, rule, hits); got != want {
			t.Fatalf("op %d: Take(%q, %d, %d) under %+v = %+v, reference %+v", i/4, key, now, hits, rule, got, want)
		}
	}
}

func fuzzCapacity(r limit.Rule) int64 {
	if r.Algorithm == limit.LeakyBucket {
		return r.Burst + 1
	}
	return r.Capacity()
}

// checkDecision asserts the Decision contract.
func checkDecision(t *testing.T, op int, r limit.Rule, capacity, now, hits int64, d limit.Decision) {
	t.Helper()
	fail := func(why string) {
		t.Fatalf("op %d: Take(_, %d, %d) under %+v = %+v: %s", op, now, hits, r, d, why)
	}
	switch {
	case d.Remaining < 0 || d.Remaining > capacity:
		fail(fmt.Sprintf("Remaining outside [0, %d]", capacity))
	case d.RetryAfter < 0 && d.RetryAfter != limit.Never:
		fail("negative RetryAfter")
	case d.Allowed && d.RetryAfter != 0:
		fail("admitted with a RetryAfter")
	case !d.Allowed && d.RetryAfter == 0:
		fail("rejected without a RetryAfter")
	case (d.RetryAfter == limit.Never) != (hits > capacity):
		fail("RetryAfter is Never exactly when hits exceed capacity")
	case d.ResetAt < now:
		fail("ResetAt in the past")
	case d.Delay < 0 || d.Delay > 0 && (r.Algorithm != limit.LeakyBucket || r.Burst == 0):
		fail("Delay only for a leaky bucket with a queue")
	case d.Delay > time.Duration(d.ResetAt-now):
		fail("Delay beyond ResetAt")
	}
}

func addSat(a, b int64) int64 {
	if s := a + b; (s > a) == (b > 0) {
		return s
	}
	if b > 0 {
		return math.MaxInt64
	}
	return math.MinInt64
}
