package window

import (
	"bytes"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/shardlimiter/shardlimiter/limit"
)

// randomCell returns a valid cell of the kind: any slot exponent and slot
// a take can store, counts up to MaxLimit (prev only when sliding), and
// something counted.
func randomCell(rng *rand.Rand, kind limit.Algorithm) cell {
	for {
		g := rng.Int64N(maxSlotExp + 1)
		c := cell{g: g, slot: rng.Int64N(maxSlot(g) + 1), cur: rng.Int64N(limit.MaxLimit + 1)}
		if rng.IntN(2) == 0 {
			c.slot, c.cur = rng.Int64N(1<<10), rng.Int64N(100)
		}
		if kind == limit.SlidingWindow {
			c.prev = rng.Int64N(limit.MaxLimit + 1)
			if rng.IntN(2) == 0 {
				c.prev = rng.Int64N(100)
			}
		}
		if c.cur != 0 || c.prev != 0 {
			return c
		}
	}
}

func TestCellRoundTrip(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(3, 4))
	for i := range 20_000 {
		kind, other := limit.FixedWindow, limit.SlidingWindow
		if i%2 == 0 {
			kind, other = other, kind
		}
		c := randomCell(rng, kind)
		b := encodeCell(kind, c)
		if got, err := decodeCell(b, kind); err != nil || got != c {
			t.Fatalf("decodeCell(encodeCell(%v, %+v)) = %+v, %v", kind, c, got, err)
		}
		if _, err := decodeCell(b, other); err == nil {
			t.Fatalf("a %v cell %+v decodes as %v", kind, c, other)
		}
	}
}

func TestDecodeCellRejects(t *testing.T) {
	t.Parallel()
	fixed := func(c cell) []byte { return encodeCell(limit.FixedWindow, c) }
	valid := fixed(cell{g: 29, slot: 3_000_000_000, cur: 5})
	for _, c := range []struct {
		name  string
		state []byte
	}{
		{"empty", nil},
		{"version 2", append([]byte{2}, valid[1:]...)},
		{"sliding kind", append([]byte{1, byte(limit.SlidingWindow)}, valid[2:]...)},
		{"truncated", valid[:len(valid)-1]},
		{"trailing byte", append(bytes.Clone(valid), 0)},
		{"overlong varint", []byte{1, byte(limit.FixedWindow), 0x9d, 0x00, 1, 5}},
		{"slot exponent 50", fixed(cell{g: 50, slot: 1, cur: 5})},
		{"slot past MaxTime", fixed(cell{g: 29, slot: maxSlot(29) + 1, cur: 5})},
		{"count over maxCount", fixed(cell{g: 29, slot: 1, cur: maxCount + 1})},
		{"nothing counted", fixed(cell{g: 29, slot: 1})},
		{"sliding: nothing counted", encodeCell(limit.SlidingWindow, cell{g: 29, slot: 1})},
		{"sliding: prev over maxCount", encodeCell(limit.SlidingWindow, cell{g: 29, slot: 1, prev: maxCount + 1, cur: 1})},
	} {
		kind := limit.FixedWindow
		if len(c.name) > 8 && c.name[:8] == "sliding:" {
			kind = limit.SlidingWindow
		}
		if got, err := decodeCell(c.state, kind); err == nil {
			t.Errorf("%s: decodeCell(%x) = %+v, want an error", c.name, c.state, got)
		}
	}
}

// TestMergeCells: the merge rules at named instants, with a period of 1s
// (slot exponent 29: slots of 2^29 ns ≈ 537ms, a window spans one or two).
func TestMergeCells(t *testing.T) {
	t.Parallel()
	const p = int64(time.Second)
	g := slotExp(p)
	start := alignedStart(time.Second) // a window boundary
	// win returns the cell counting cur (and prev) in the window ending at
	// start + k periods.
	win := func(k, prev, cur int64) cell { return cell{g: g, slot: (start + k*p) >> g, prev: prev, cur: cur} }
	now := start + p/2 // in the window ending at start+1p
	for _, c := range []struct {
		name      string
		merge     func(a, b cell, now int64) cell
		local, in cell
		want      cell
	}{
		{"fixed: same window, larger count", mergeFixed, win(1, 0, 3), win(1, 0, 5), win(1, 0, 5)},
		{"fixed: same window, local larger", mergeFixed, win(1, 0, 5), win(1, 0, 3), win(1, 0, 5)},
		{"fixed: later window wins", mergeFixed, win(0, 0, 9), win(1, 0, 2), win(1, 0, 2)},
		{"fixed: earlier window loses", mergeFixed, win(1, 0, 2), win(0, 0, 9), win(1, 0, 2)},
		{"fixed: fresh local", mergeFixed, cell{}, win(1, 0, 2), win(1, 0, 2)},
		// Ended windows count nothing, whatever their count.
		{"fixed: in's window is over", mergeFixed, win(1, 0, 2), win(-3, 0, 9), win(1, 0, 2)},
		{"fixed: local's window is over", mergeFixed, win(-3, 0, 9), win(-2, 0, 1), win(-3, 0, 9)},
		{"sliding: same window, larger of each", mergeSliding, win(1, 7, 3), win(1, 4, 5), win(1, 7, 5)},
		// The earlier cell's current window is the later one's previous.
		{"sliding: previous window folds into prev", mergeSliding, win(0, 1, 9), win(1, 4, 2), win(1, 9, 2)},
		{"sliding: previous window, prev already larger", mergeSliding, win(1, 12, 2), win(0, 0, 9), win(1, 12, 2)},
		{"sliding: two windows back counts nothing", mergeSliding, win(-1, 0, 9), win(1, 4, 2), win(1, 4, 2)},
		{"sliding: another octave, the later window", mergeSliding, cell{g: g + 1, slot: (start - p) >> (g + 1), cur: 9}, win(1, 0, 2), win(1, 0, 2)},
	} {
		if got := c.merge(c.local, c.in, now); got != c.want {
			t.Errorf("%s: merge(%+v, %+v, start+p/2) = %+v, want %+v", c.name, c.local, c.in, got, c.want)
		}
	}
}

// FuzzCellState decodes arbitrary bytes as a FIXED_WINDOW and as a
// SLIDING_WINDOW state. Decode must never panic; what it accepts must
// re-encode to the same bytes, import, merge with another accepted state,
// and be taken from within the Decision contract, leaving a state that
// exports and decodes again.
func FuzzCellState(f *testing.F) {
	g := slotExp(int64(time.Second))
	slot := (t0 + int64(time.Second)) >> g
	for _, c := range []cell{{g: g, slot: slot, cur: 3}, {g: g, slot: slot, prev: 2, cur: 7}, {g: 0, slot: maxSlot(0), cur: limit.MaxLimit}} {
		other := encodeCell(limit.SlidingWindow, cell{g: g, slot: slot - 2, prev: 1, cur: 9})
		f.Add(encodeCell(limit.FixedWindow, c), other, int64(0), uint16(2))
		f.Add(encodeCell(limit.SlidingWindow, c), other, int64(time.Second), uint16(400))
	}
	f.Fuzz(func(t *testing.T, state, other []byte, offset int64, hits uint16) {
		for _, tc := range []struct {
			kind limit.Algorithm
			k    *codec
			l    limit.Limiter
		}{
			{limit.FixedWindow, &fixedCodec, NewFixed(fuzzCfg)},
			{limit.SlidingWindow, &slidingCodec, NewSliding(fuzzCfg)},
		} {
			c, err := decodeCell(state, tc.kind)
			if err != nil {
				continue
			}
			if got := encodeCell(tc.kind, c); !bytes.Equal(got, state) {
				t.Fatalf("decodeCell(%x) = %+v, which encodes as %x", state, c, got)
			}
			now := clampTime(clampAdd(t0, offset))
			if err := tc.l.Import("k", state, now, true); err != nil {
				t.Fatalf("Import(%x) = %v after it decoded", state, err)
			}
			if o, err := decodeCell(other, tc.kind); err == nil {
				if m := tc.k.merge(c, o, now); !tc.k.fresh(m, now) {
					if back, err := decodeCell(encodeCell(tc.kind, m), tc.kind); err != nil || back != m {
						t.Fatalf("merge(%+v, %+v) = %+v, which does not decode: %v", c, o, m, err)
					}
				}
				if err := tc.l.Import("k", other, now, true); err != nil {
					t.Fatalf("Import(%x) = %v after it decoded", other, err)
				}
			}
			for i, p := range []int64{1 << c.g, 3 << c.g >> 1, int64(time.Second)} {
				r := limit.Rule{Algorithm: tc.kind, Limit: 1 + int64(hits)%7, Period: time.Duration(min(p, int64(limit.MaxPeriod)))}
				if i == 1 {
					r.Behavior = limit.CountRejected
				}
				h := int64(hits) % 9
				at := now + int64(i)*int64(r.Period)/3
				checkDecision(t, r, at, h, tc.l.Take("k", at, r, h))
				if st, ok := tc.l.Export("k", at); ok {
					if _, err := decodeCell(st, tc.kind); err != nil {
						t.Fatalf("after %d takes the key exports %x, which does not decode: %v", i+1, st, err)
					}
				}
			}
		}
	})
}
