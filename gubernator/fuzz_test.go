package gubernator

import (
	"testing"

	"github.com/shardlimiter/shardlimiter/limit"
)

// FuzzTake plays a sequence of checks drawn from data on one key (both
// algorithms, limits and durations 0 included, refunds, resets, drains)
// and holds the invariants every answer keeps: no panic, remaining never
// negative, and a state that crosses the wire comes back whole.
func FuzzTake(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15})
	f.Add([]byte{255, 3, 7, 200, 1, 1, 1, 1, 90, 4, 33, 0, 0, 8, 250, 17})
	f.Fuzz(func(t *testing.T, data []byte) {
		var it Item
		now := t0
		for len(data) >= 4 {
			op, hits, step, lim := data[0], int64(int8(data[1])), int64(data[2]), int64(data[3]%20)
			data = data[4:]
			now += step * 37
			r := Request{Algorithm: tb, Hits: hits, Limit: lim, Duration: int64(op%8) * 500, Burst: int64(op>>4) % 5}
			if op&1 == 1 {
				r.Algorithm = lb
			}
			if op&2 == 2 {
				r.Behavior |= limit.DrainOverLimit
			}
			if op&0x40 != 0 {
				r.Behavior |= limit.Reset
			}
			resp := Take(&it, now, r)
			if resp.Remaining < 0 {
				t.Fatalf("Take(%+v) = %+v: remaining < 0", r, resp)
			}
			if it.Kind != None {
				back, err := decode(encode(&it))
				if err != nil || back != it {
					t.Fatalf("decode(encode(%+v)) = %+v, %v", it, back, err)
				}
			}
		}
	})
}

// A token bucket under one rule, hit by positive hits, admits at most its
// limit in a window, whatever the sizes.
func TestTokenBucketBound(t *testing.T) {
	t.Parallel()
	var it Item
	admitted := int64(0)
	for i := range 1000 {
		hits := int64(i%7 + 1)
		if !Take(&it, t0+int64(i), Request{Algorithm: tb, Hits: hits, Limit: 100, Duration: 60_000, Behavior: limit.DrainOverLimit * limit.Behavior(i%2)}).Over {
			admitted += hits
		}
	}
	if admitted > 100 {
		t.Errorf("admitted %d hits in one 60 s window of limit 100", admitted)
	}
}
