package bucket

import (
	"bytes"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/shardlimiter/shardlimiter/limit"
	"github.com/shardlimiter/shardlimiter/table"
)

// randomImage returns a valid key state of the token bucket (warm or not)
// or the leaky bucket: a rule Validate accepts, any TAT up to maxTAT, and
// warm-up permits of a warm-up of 1 ns to MaxPeriod.
func randomImage(rng *rand.Rand, shaping bool) keyImage {
	for {
		s := keyImage{
			shaping: shaping,
			limit:   1 + rng.Int64N(limit.MaxLimit),
			period:  1 + rng.Int64N(int64(limit.MaxPeriod)),
			tat:     rng.Int64N(maxTAT + 1),
		}
		s.cap = 1 + rng.Int64N(limit.MaxLimit)
		switch rng.IntN(3) { // small numbers too, where varints are short
		case 0:
			s.limit, s.cap, s.period = 1+rng.Int64N(20), 1+rng.Int64N(20), 1+rng.Int64N(int64(10*sec))
		case 1:
			s.tat = rng.Int64N(1 << 20)
		}
		if s.ruleOf().Validate() != nil {
			continue
		}
		if !shaping && rng.IntN(2) == 0 {
			w := 1 + rng.Int64N(int64(limit.MaxPeriod))
			s.warm, s.maxp = true, float64(w)/s.stable()
			s.stored = s.maxp * rng.Float64()
		}
		return s
	}
}

func TestImageRoundTrip(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 20_000 {
		shaping := i%2 == 0
		s := randomImage(rng, shaping)
		b := encodeImage(s)
		got, err := decodeImage(b, shaping)
		if err != nil || got != s {
			t.Fatalf("decodeImage(encodeImage(%+v)) = %+v, %v", s, got, err)
		}
		if _, err := decodeImage(b, !shaping); err == nil {
			t.Fatalf("%+v decodes as the other bucket algorithm", s)
		}
	}
}

func TestDecodeImageRejects(t *testing.T) {
	t.Parallel()
	valid := encodeImage(keyImage{limit: 10, cap: 10, period: int64(sec), tat: t0})
	warm := encodeImage(keyImage{warm: true, limit: 10, cap: 10, period: int64(sec), tat: t0, stored: 1, maxp: 20})
	withFloats := func(stored, maxp float64) []byte {
		return encodeImage(keyImage{warm: true, limit: 10, cap: 10, period: int64(sec), tat: t0, stored: stored, maxp: maxp})
	}
	for _, c := range []struct {
		name  string
		state []byte
	}{
		{"empty", nil},
		{"version 2", append([]byte{2}, valid[1:]...)},
		{"unknown kind", append([]byte{1, 7}, valid[2:]...)},
		{"leaky with warm-up", append([]byte{1, 1 | kindWarm}, warm[2:]...)},
		{"truncated", valid[:len(valid)-1]},
		{"trailing byte", append(bytes.Clone(valid), 0)},
		{"overlong varint", append([]byte{1, 0, 0x8a, 0x00}, valid[3:]...)},
		{"limit 0", encodeImage(keyImage{limit: 0, cap: 10, period: int64(sec), tat: t0})},
		{"capacity 0", encodeImage(keyImage{limit: 10, cap: 0, period: int64(sec), tat: t0})},
		{"period 0", encodeImage(keyImage{limit: 10, cap: 10, period: 0, tat: t0})},
		{"period over MaxPeriod", encodeImage(keyImage{limit: 10, cap: 10, period: int64(limit.MaxPeriod) + 1, tat: t0})},
		{"refill over MaxCapacityTime", encodeImage(keyImage{limit: 1, cap: 1000, period: int64(limit.MaxPeriod), tat: t0})},
		{"TAT past maxTAT", encodeImage(keyImage{limit: 10, cap: 10, period: int64(sec), tat: maxTAT + 1})},
		{"warm without permits", warm[:len(warm)-16]},
		{"NaN permits", withFloats(math.NaN(), 20)},
		{"negative permits", withFloats(-1, 20)},
		{"negative zero permits", withFloats(math.Copysign(0, -1), 20)},
		{"permits over maxp", withFloats(21, 20)},
		{"maxp 0", withFloats(0, 0)},
		{"infinite maxp", withFloats(1, math.Inf(1))},
		{"warm-up under 1 ns", withFloats(0, 1e-12)},
		{"warm-up over MaxPeriod", withFloats(0, 2*float64(limit.MaxPeriod)/1e8)},
	} {
		if s, err := decodeImage(c.state, false); err == nil {
			t.Errorf("%s: decodeImage(%x) = %+v, want an error", c.name, c.state, s)
		}
	}
	if _, err := decodeImage(valid, false); err != nil {
		t.Fatalf("the valid state is rejected: %v", err)
	}
}

// TestMergeImages: the merge rule, case by case, at named instants. The
// token rule is 10 per second: a hit costs T = 100ms, a full bucket τ = 1s.
func TestMergeImages(t *testing.T) {
	t.Parallel()
	at := func(d time.Duration) int64 { return t0 + int64(d) }
	token := func(lim, capacity int64, tat int64) keyImage {
		return keyImage{limit: lim, cap: capacity, period: int64(sec), tat: tat}
	}
	leaky := func(lim, capacity int64, tat int64) keyImage {
		return keyImage{shaping: true, limit: lim, cap: capacity, period: int64(sec), tat: tat}
	}
	// warm-up 2s at 10/s: stable interval 100ms, maxp 20 permits.
	warm := func(tat int64, stored, maxp float64) keyImage {
		return keyImage{warm: true, limit: 10, cap: 10, period: int64(sec), tat: tat, stored: stored, maxp: maxp}
	}
	now := t0
	for _, c := range []struct {
		name      string
		local, in keyImage
		want      keyImage
		changed   bool // the result is not local
	}{
		{"later TAT wins", token(10, 10, at(300*ms)), token(10, 10, at(500*ms)), token(10, 10, at(500*ms)), true},
		{"earlier TAT loses", token(10, 10, at(500*ms)), token(10, 10, at(300*ms)), token(10, 10, at(500*ms)), false},
		{"both full: local kept", token(10, 10, at(-2*sec)), token(10, 10, at(-sec)), token(10, 10, at(-2*sec)), false},
		{"fresh local takes in", keyImage{}, token(10, 10, at(300*ms)), token(10, 10, at(300*ms)), true},
		{"full in changes nothing", token(10, 10, at(100*ms)), token(10, 10, at(0)), token(10, 10, at(100*ms)), false},
		// 60% of 100/s in use (600ms of τ = 1s) beats 50% of 10/s.
		{"other limit: larger fraction", token(10, 10, at(500*ms)), token(100, 100, at(600*ms)), token(100, 100, at(600*ms)), true},
		// 50% of 10 (5 hits) beats 40% of 20 (8 hits, 800ms): right after
		// now, under either rule, the 50% side leaves less. The 40% side
		// drains its 800ms later, though: its TAT is kept, on the rule of
		// the 50% side (80% of it), so that neither side ever leaves less.
		{"other capacity: fraction, not time", token(10, 10, at(500*ms)), token(10, 20, at(800*ms)), token(10, 10, at(800*ms)), true},
		{"other rule, equal fractions: local rule", token(10, 10, at(500*ms)), token(10, 20, at(sec)), token(10, 10, at(sec)), true},
		{"other rule, later and fuller: in", token(10, 10, at(500*ms)), token(10, 20, at(1200*ms)), token(10, 20, at(1200*ms)), true},
		{"other rule, earlier and emptier: local", token(10, 10, at(500*ms)), token(10, 20, at(400*ms)), token(10, 10, at(500*ms)), false},
		// Leaky: queued hits. 4 queued at 20/s (200ms) beat 3 at 10/s
		// (300ms); the queue then lasts the later 300ms: 6 hits at 20/s.
		{"leaky: more queued hits, later TAT", leaky(10, 5, at(300*ms)), leaky(20, 10, at(200*ms)), leaky(20, 10, at(300*ms)), true},
		// Warm: in, brought to 500ms as if idle, cools 3 permits: 10+3 = 13.
		{"warm: later TAT, colder permits", warm(at(500*ms), 2, 20), warm(at(200*ms), 10, 20), warm(at(500*ms), 13, 20), true},
		{"warm: local dominates", warm(at(500*ms), 14, 20), warm(at(200*ms), 10, 20), warm(at(500*ms), 14, 20), false},
		{"warm: in dominates", warm(at(200*ms), 1, 20), warm(at(500*ms), 10, 20), warm(at(500*ms), 10, 20), true},
		// Full buckets cool to now: local 1+10 (idle 1s), in 5+5.
		{"warm: both full, colder at now", warm(at(-sec), 1, 20), warm(at(-500*ms), 5, 20), warm(at(-sec), 1, 20), false},
		// A 4s warm-up (maxp 40): 30 of 40 is 15 of 20.
		{"warm: other warm-up length", warm(at(500*ms), 10, 20), warm(at(500*ms), 30, 40), warm(at(500*ms), 15, 20), true},
		{"warm against plain: fraction", warm(at(200*ms), 20, 20), token(10, 10, at(300*ms)), token(10, 10, at(300*ms)), true},
		{"plain against warm: fraction", token(10, 10, at(300*ms)), warm(at(200*ms), 5, 20), token(10, 10, at(300*ms)), false},
		// A plain key that turns to warm-up starts fully cold.
		{"warm against plain: fully cold", warm(at(300*ms), 5, 20), token(10, 10, at(200*ms)), warm(at(300*ms), 20, 20), true},
		// 40% of 10/s beats 20% of 20/s; at 400ms in has cooled 4 of its
		// 40 permits (stable 50ms): 24 of 40, 60%, 12 of local's 20.
		{"warm, other rule: colder fraction", warm(at(400*ms), 5, 20),
			keyImage{warm: true, limit: 20, cap: 20, period: int64(sec), tat: at(200 * ms), stored: 20, maxp: 40},
			warm(at(400*ms), 12, 20), true},
	} {
		got := mergeImages(c.local, c.in, now)
		if got != c.want {
			t.Errorf("%s: mergeImages(%+v, %+v, t0) = %+v, want %+v", c.name, c.local, c.in, got, c.want)
		}
		if changed := got != c.local; changed != c.changed {
			t.Errorf("%s: the merge changed the local state: %v, want %v", c.name, changed, c.changed)
		}
	}
}

// FuzzState decodes arbitrary bytes as a token-bucket and as a leaky-bucket
// state. Decode must never panic; what it accepts must re-encode to the
// same bytes, import into a table, merge with another accepted state, and
// be taken from (under its own rule and another) within the Decision
// contract, leaving a state that exports and decodes again.
func FuzzState(f *testing.F) {
	for _, s := range []keyImage{
		{limit: 10, cap: 10, period: int64(sec), tat: t0 + int64(300*ms)},
		{warm: true, limit: 10, cap: 1, period: int64(sec), tat: t0 + int64(100*ms), stored: 7.5, maxp: 20},
		{shaping: true, limit: 3, cap: 5, period: int64(700 * ms), tat: t0 + int64(sec)},
		{limit: limit.MaxLimit, cap: limit.MaxLimit, period: int64(ms), tat: maxTAT},
	} {
		f.Add(encodeImage(s), encodeImage(keyImage{limit: 7, cap: 3, period: int64(sec), tat: t0 + int64(sec)}), int64(0), uint8(3))
	}
	f.Add([]byte{1, 0, 0x8a}, []byte{}, int64(-1), uint8(200))
	f.Fuzz(func(t *testing.T, state, other []byte, offset int64, hits uint8) {
		for _, shaping := range []bool{false, true} {
			s, err := decodeImage(state, shaping)
			if err != nil {
				continue
			}
			if got := encodeImage(s); !bytes.Equal(got, state) {
				t.Fatalf("decodeImage(%x) = %+v, which encodes as %x", state, s, got)
			}
			now := clampNow(t0 + offset)
			var l limit.Limiter = NewTokenBucket(table.Config{MaxKeys: 8})
			if shaping {
				l = NewLeakyBucket(table.Config{MaxKeys: 8})
			}
			if err := l.Import("k", state, now, true); err != nil {
				t.Fatalf("Import(%x) = %v after it decoded", state, err)
			}
			if o, err := decodeImage(other, shaping); err == nil {
				m := mergeImages(s, o, now)
				if back, err := decodeImage(encodeImage(m), shaping); err != nil || back != m {
					t.Fatalf("mergeImages(%+v, %+v) = %+v, which does not decode: %v", s, o, m, err)
				}
				if err := l.Import("k", other, now, true); err != nil {
					t.Fatalf("Import(%x) = %v after it decoded", other, err)
				}
			}
			own := s.ruleOf()
			if s.warm {
				own.Warmup = max(time.Duration(math.Round(s.maxp*s.stable())), 1)
			}
			if own.Validate() != nil {
				own = s.ruleOf()
			}
			plain := limit.Rule{Algorithm: own.Algorithm, Limit: 10, Period: sec, Behavior: limit.CountRejected}
			for i, r := range []limit.Rule{own, plain, own} {
				capacity := fuzzCapacity(r)
				h := int64(hits) % (capacity + 2)
				at := now + int64(i)*int64(r.Period)/3
				checkDecision(t, i, r, capacity, clampNow(at), h, l.Take("k", at, r, h))
				if st, ok := l.Export("k", at); ok {
					if _, err := decodeImage(st, shaping); err != nil {
						t.Fatalf("after %d takes the key exports %x, which does not decode: %v", i+1, st, err)
					}
				}
			}
		}
	})
}
