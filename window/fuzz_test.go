package window

import (
	"encoding/binary"
	"math"
	"testing"
	"time"

	"github.com/shardlimiter/shardlimiter/limit"
	"github.com/shardlimiter/shardlimiter/table"
)

// fuzzTakes decodes ops into takes against an optimized table and its
// reference and checks every decision: the invariants of limit.Decision,
// and equality with the reference. Each op is 7 bytes: a signed time step
// (4 bytes, scaled to the period), hits (2 bytes) and flags (reset,
// count-rejected, second rule, unbounded hits, second key, sweep first).
//
// Only the optimized table is swept, and a sweep must not change any
// decision of a take at most idleSlack older than it; after an older take
// the two tables may legitimately differ, and only the invariants are
// checked from then on.
func fuzzTakes(t *testing.T, opt, ref limit.Limiter, r limit.Rule, start int64, ops []byte) {
	if r.Validate() != nil {
		t.Skip()
	}
	alt := r
	alt.Limit = r.Limit/2 + 1
	alt.Period = r.Period + r.Period/2
	if alt.Validate() != nil {
		alt = r
	}
	now, swept, compare := start, int64(math.MinInt64), true
	for ; len(ops) >= 7; ops = ops[7:] {
		step := int64(int32(binary.LittleEndian.Uint32(ops)))
		now = clampAdd(now, step*max(int64(r.Period)>>31, 1))
		hits := int64(binary.LittleEndian.Uint16(ops[4:]))
		flags := ops[6]
		rule := r
		if flags&4 != 0 {
			rule = alt
		}
		if flags&1 != 0 {
			rule.Behavior |= limit.Reset
		}
		if flags&2 != 0 {
			rule.Behavior |= limit.CountRejected
		}
		if o := rule; flags&64 != 0 {
			o.Behavior |= limit.Overdraft
			if o.Validate() == nil { // a SLIDING_LOG at MaxLogLimit refuses it
				rule = o
			}
		}
		if flags&8 == 0 {
			hits %= rule.Limit + 2
		}
		key := "k"
		if flags&16 != 0 {
			key = "j"
		}
		if flags&32 != 0 {
			opt.Sweep(now, math.MaxInt)
			swept = max(swept, clampTime(now))
		}
		compare = compare && clampTime(now) >= swept-idleSlack
		d := opt.Take(key, now, rule, hits)
		checkDecision(t, rule, now, hits, d)
		if want := ref.Take(key, now, rule, hits); compare && d != want {
			t.Fatalf("Take(%q, %d, %+v, %d) = %+v, reference %+v", key, now, rule, hits, d, want)
		}
	}
}

// clampAdd returns now+step, saturated at the int64 range.
func clampAdd(now, step int64) int64 {
	s := now + step
	if step > 0 && s < now {
		return math.MaxInt64
	}
	if step < 0 && s > now {
		return math.MinInt64
	}
	return s
}

// checkDecision fails t if d breaks an invariant of limit.Decision.
func checkDecision(t *testing.T, r limit.Rule, now, hits int64, d limit.Decision) {
	t.Helper()
	bad := ""
	switch {
	case d.Remaining < 0 || d.Remaining > r.Limit:
		bad = "Remaining outside [0, Limit]"
	case d.RetryAfter < 0 && d.RetryAfter != limit.Never:
		bad = "negative RetryAfter"
	case d.Allowed && d.RetryAfter != 0:
		bad = "admitted with a RetryAfter"
	case !d.Allowed && d.RetryAfter == 0:
		bad = "rejected without a RetryAfter"
	case (hits > r.Limit) != (d.RetryAfter == limit.Never):
		bad = "RetryAfter is Never iff hits > Limit"
	case d.ResetAt < clampTime(now):
		bad = "ResetAt before now"
	case d.Delay != 0:
		bad = "a Delay"
	}
	if bad != "" {
		t.Fatalf("Take(%d, %+v, %d) = %+v: %s", now, r, hits, d, bad)
	}
}

// fuzzCfg is a small table (one shard), cheap to build for every input.
var fuzzCfg = table.Config{MaxKeys: 8}

func addSeeds(f *testing.F, alg limit.Algorithm) {
	ops := []byte{
		0, 0, 0, 0, 1, 0, 0, // 1 hit
		0, 1, 0, 0, 10, 0, 2, // 10 hits, counting rejected
		0xff, 0xff, 0xff, 0xff, 3, 0, 4, // back 1 ns-ish, second rule
		0, 0, 1, 0, 0, 0, 33, // peek after a sweep, reset
	}
	f.Add(int64(10), int64(time.Minute), int64(0), t0, ops)
	f.Add(int64(200), int64(time.Millisecond), int64(0), t0, ops)
	f.Add(int64(limit.MaxLimit), int64(100*time.Microsecond), int64(0), int64(-1), ops)
	f.Add(int64(3), int64(limit.MaxPeriod), int64(time.Hour), int64(math.MaxInt64), ops)
	if alg == limit.SlidingLog {
		f.Add(int64(5), int64(time.Second), int64(300*time.Millisecond), t0, ops)
	}
}

func FuzzFixed(f *testing.F) {
	addSeeds(f, limit.FixedWindow)
	f.Fuzz(func(t *testing.T, lim, period, _ int64, start int64, ops []byte) {
		r := limit.Rule{Algorithm: limit.FixedWindow, Limit: lim, Period: time.Duration(period)}
		fuzzTakes(t, NewFixed(fuzzCfg), newRefFixed(), r, start, ops)
	})
}

func FuzzSliding(f *testing.F) {
	addSeeds(f, limit.SlidingWindow)
	f.Fuzz(func(t *testing.T, lim, period, _ int64, start int64, ops []byte) {
		r := limit.Rule{Algorithm: limit.SlidingWindow, Limit: lim, Period: time.Duration(period)}
		fuzzTakes(t, NewSliding(fuzzCfg), newRefSliding(), r, start, ops)
	})
}

func FuzzLog(f *testing.F) {
	addSeeds(f, limit.SlidingLog)
	f.Fuzz(func(t *testing.T, lim, period, minInterval int64, start int64, ops []byte) {
		r := limit.Rule{Algorithm: limit.SlidingLog, Limit: lim, Period: time.Duration(period), MinInterval: time.Duration(minInterval)}
		fuzzTakes(t, NewLog(fuzzCfg), newRefLog(), r, start, ops)
	})
}
