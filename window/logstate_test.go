package window

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/shardlimiter/shardlimiter/limit"
)

// randomLog returns a valid log image: strictly increasing instants in
// [0, MaxTime], at most MaxLogLimit hits, idleAt 1 ns to MaxPeriod after
// the newest.
func randomLog(rng *rand.Rand) logImage {
	n := 1 + rng.IntN(20)
	if rng.IntN(50) == 0 {
		n = 1 + rng.IntN(limit.MaxLogLimit)
	}
	t := rng.Int64N(MaxTime / 2)
	if rng.IntN(2) == 0 {
		t = t0 - int64(time.Minute)
	}
	im := logImage{}
	left := int64(limit.MaxLogLimit)
	for range n {
		h := 1 + rng.Int64N(min(left-int64(n-len(im.runs))+1, 5))
		left -= h
		im.runs = append(im.runs, logRun{t, h})
		t += 1 + rng.Int64N(int64(time.Second))
	}
	im.idleAt = im.runs[len(im.runs)-1].t + 1 + rng.Int64N(int64(limit.MaxPeriod))
	return im
}

func TestLogRoundTrip(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(5, 6))
	for range 5_000 {
		im := randomLog(rng)
		b := encodeLog(im)
		got, err := decodeLog(b)
		if err != nil || !got.equal(im) {
			t.Fatalf("decodeLog(encodeLog(%d runs)) = %d runs, %v", len(im.runs), len(got.runs), err)
		}
	}
	// The same through a key's runs.
	var s logState
	im := randomLog(rng)
	setLog(&s, im)
	if got := imageOfLog(&s); !got.equal(im) {
		t.Fatalf("imageOfLog(setLog(%+v)) = %+v", im, got)
	}
}

func TestDecodeLogRejects(t *testing.T) {
	t.Parallel()
	// raw builds a log: hold, newest, then runs as (gap, hits) pairs, the
	// first gap ignored.
	raw := func(hold, newest uint64, runs ...uint64) []byte {
		b := []byte{stateVersion, byte(limit.SlidingLog)}
		b = binary.AppendUvarint(b, hold)
		b = binary.AppendUvarint(b, newest)
		b = binary.AppendUvarint(b, uint64(len(runs)/2))
		for i := 0; i < len(runs); i += 2 {
			if i > 0 {
				b = binary.AppendUvarint(b, runs[i])
			}
			b = binary.AppendUvarint(b, runs[i+1])
		}
		return b
	}
	sec := uint64(time.Second)
	valid := raw(sec, uint64(t0), 0, 2, 5, 1)
	if _, err := decodeLog(valid); err != nil {
		t.Fatalf("the valid log is rejected: %v", err)
	}
	many := []uint64{0, limit.MaxLogLimit}
	tooLong := []uint64{}
	for range limit.MaxLogEntries + 1 {
		tooLong = append(tooLong, 1, 1)
	}
	for _, c := range []struct {
		name  string
		state []byte
	}{
		{"empty", nil},
		{"version 2", append([]byte{2}, valid[1:]...)},
		{"fixed kind", append([]byte{1, byte(limit.FixedWindow)}, valid[2:]...)},
		{"truncated", valid[:len(valid)-1]},
		{"trailing byte", append(bytes.Clone(valid), 0)},
		{"no runs", raw(sec, uint64(t0))},
		{"hold 0", raw(0, uint64(t0), 0, 2)},
		{"hold over MaxPeriod", raw(uint64(limit.MaxPeriod)+1, uint64(t0), 0, 2)},
		{"newest past MaxTime", raw(sec, MaxTime+1, 0, 2)},
		{"0 hits in a run", raw(sec, uint64(t0), 0, 2, 5, 0)},
		{"gap 0", raw(sec, uint64(t0), 0, 2, 0, 1)},
		{"before instant 0", raw(sec, 10, 0, 2, 11, 1)},
		{"more hits than MaxLogLimit", raw(sec, uint64(t0), append(many, 1, 1)...)},
		{"more runs than MaxLogEntries", raw(sec, uint64(t0), tooLong...)},
		{"more runs than bytes", binary.AppendUvarint(binary.AppendUvarint(raw(sec, uint64(t0))[:len(raw(sec, uint64(t0)))-1], 1000), 1)},
	} {
		if got, err := decodeLog(c.state); err == nil {
			t.Errorf("%s: decodeLog(%x) = %+v, want an error", c.name, c.state, got)
		}
	}
}

// TestMergeLogs: the union at each instant's larger count, cut to the
// newest n = the longer log's length, at named instants.
func TestMergeLogs(t *testing.T) {
	t.Parallel()
	const ms, sec = time.Millisecond, time.Second
	at := func(d time.Duration) int64 { return t0 + int64(d) }
	log := func(idle time.Duration, runs ...logRun) logImage { return logImage{idleAt: at(idle), runs: runs} }
	r := func(d time.Duration, n int64) logRun { return logRun{at(d), n} }
	now := at(0)
	for _, c := range []struct {
		name      string
		local, in logImage
		want      logImage
	}{
		{"a replica's copy adds nothing", log(sec, r(-300*ms, 2), r(-100*ms, 1)), log(sec, r(-300*ms, 2), r(-100*ms, 1)),
			log(sec, r(-300*ms, 2), r(-100*ms, 1))},
		{"a shorter copy adds nothing", log(sec, r(-300*ms, 2), r(-100*ms, 1)), log(900*ms, r(-300*ms, 1)),
			log(sec, r(-300*ms, 2), r(-100*ms, 1))},
		{"diverged logs add up, newest 3 kept", log(sec, r(-300*ms, 2), r(-100*ms, 1)), log(1200*ms, r(-300*ms, 1), r(200*ms, 1)),
			log(1200*ms, r(-300*ms, 1), r(-100*ms, 1), r(200*ms, 1))},
		{"larger count at one instant", log(sec, r(-100*ms, 1)), log(sec, r(-100*ms, 3)), log(sec, r(-100*ms, 3))},
		{"fresh local takes in", logImage{}, log(sec, r(-100*ms, 3)), log(sec, r(-100*ms, 3))},
		{"idle local is replaced", log(0, r(-sec, 5)), log(sec, r(-100*ms, 1)), log(sec, r(-100*ms, 1))},
		{"idle in changes nothing", log(sec, r(-100*ms, 1)), log(-1, r(-sec, 5)), log(sec, r(-100*ms, 1))},
	} {
		if got := mergeLogs(c.local, c.in, now); !got.equal(c.want) {
			t.Errorf("%s: mergeLogs(%+v, %+v, t0) = %+v, want %+v", c.name, c.local, c.in, got, c.want)
		}
	}
}

// FuzzLogState decodes arbitrary bytes as a SLIDING_LOG state. Decode must
// never panic; what it accepts must re-encode to the same bytes, import,
// merge with another accepted state, and be taken from within the Decision
// contract, leaving a state that exports and decodes again.
func FuzzLogState(f *testing.F) {
	rng := rand.New(rand.NewPCG(1, 1))
	for range 4 {
		f.Add(encodeLog(randomLog(rng)), encodeLog(randomLog(rng)), int64(0), uint8(1))
	}
	one := logImage{idleAt: t0 + int64(time.Second), runs: []logRun{{t0 - int64(time.Millisecond), 3}}}
	f.Add(encodeLog(one), encodeLog(one), int64(-time.Second), uint8(2))
	f.Fuzz(func(t *testing.T, state, other []byte, offset int64, hits uint8) {
		im, err := decodeLog(state)
		if err != nil {
			return
		}
		if got := encodeLog(im); !bytes.Equal(got, state) {
			t.Fatalf("decodeLog(%x) = %+v, which encodes as %x", state, im, got)
		}
		newest := im.runs[len(im.runs)-1].t
		now := clampTime(clampAdd(newest, offset%int64(2*time.Second)))
		l := NewLog(fuzzCfg)
		if err := l.Import("k", state, now, true); err != nil {
			t.Fatalf("Import(%x) = %v after it decoded", state, err)
		}
		if o, err := decodeLog(other); err == nil {
			if m := mergeLogs(im, o, now); !m.freshAt(now) {
				if back, err := decodeLog(encodeLog(m)); err != nil || !back.equal(m) {
					t.Fatalf("mergeLogs(%+v, %+v) = %+v, which does not decode: %v", im, o, m, err)
				}
			}
			if err := l.Import("k", other, now, true); err != nil {
				t.Fatalf("Import(%x) = %v after it decoded", other, err)
			}
		}
		for i, r := range []limit.Rule{
			{Algorithm: limit.SlidingLog, Limit: 1 + int64(hits)%5, Period: time.Second},
			{Algorithm: limit.SlidingLog, Limit: 50, Period: time.Minute, MinInterval: time.Millisecond, Behavior: limit.CountRejected},
			{Algorithm: limit.SlidingLog, Limit: limit.MaxLogLimit, Period: 10 * time.Millisecond},
		} {
			h := int64(hits) % 7
			at := now + int64(i)*int64(time.Millisecond)
			checkDecision(t, r, at, h, l.Take("k", at, r, h))
			if st, ok := l.Export("k", at); ok {
				if _, err := decodeLog(st); err != nil {
					t.Fatalf("after %d takes the key exports %x, which does not decode: %v", i+1, st, err)
				}
			}
		}
	})
}
