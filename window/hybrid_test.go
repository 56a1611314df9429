package window

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/shardlimiter/shardlimiter/limit"
	"github.com/shardlimiter/shardlimiter/table"
)

type packer struct {
	name   string
	pack   func(cell) (int64, bool)
	unpack func(int64) cell
	bits   func(g int64) int64 // count bits at slot exponent g
	prev   bool
}

var packers = []packer{
	{"fixed", packFixed, unpackFixed, func(g int64) int64 { return g - 4 }, false},
	{"sliding", packSliding, unpackSliding, slidingBits, true},
}

// TestPackRoundTrip: every cell within the documented bounds packs into a
// word that is neither Dead nor wideWord and unpacks to itself; counts one
// past the bound and periods under 2^19 ns do not pack.
func TestPackRoundTrip(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(3, 4))
	for _, pk := range packers {
		for range 100_000 {
			g := minPackedExp + rng.Int64N(maxSlotExp-minPackedExp+1)
			b := pk.bits(g)
			c := cell{g: g, slot: rng.Int64N(1 << (62 - g)), cur: 1 + rng.Int64N(1<<b-1)}
			if pk.prev {
				c.prev = rng.Int64N(1 << b)
			}
			if rng.IntN(10) == 0 {
				c.cur, c.prev, c.slot = 1<<b-1, 1<<b-1, 1<<(62-g)-1
				if !pk.prev {
					c.prev = 0
				}
			}
			w, ok := pk.pack(c)
			if !ok || w < 0 || w == wideWord || pk.unpack(w) != c {
				t.Fatalf("%s: pack(%+v) = %#x, %v; unpacks to %+v", pk.name, c, w, ok, pk.unpack(w))
			}
			c.cur = 1 << b
			if _, ok := pk.pack(c); ok {
				t.Fatalf("%s: pack(%+v) fits, want too large", pk.name, c)
			}
		}
		if _, ok := pk.pack(cell{g: minPackedExp - 1, slot: 5, cur: 1}); ok {
			t.Fatalf("%s: a period under 2^19 ns packs", pk.name)
		}
		if w, ok := pk.pack(cell{g: 30, slot: 5}); !ok || w != 0 {
			t.Fatalf("%s: an empty cell packs to %#x, %v; want 0, true", pk.name, w, ok)
		}
	}
}

// TestPackedBounds pins the largest packed count per period quoted in the
// docs of packFixed and packSliding.
func TestPackedBounds(t *testing.T) {
	t.Parallel()
	day := 24 * time.Hour
	for _, tc := range []struct {
		p              time.Duration
		fixed, sliding int64
	}{
		{time.Millisecond, 1<<15 - 1, 127},
		{time.Second, 1<<25 - 1, 4095},
		{time.Minute, 1<<31 - 1, 32767},
		{time.Hour, 1<<37 - 1, 262143},
		{day, 1<<42 - 1, 2097151},
		{7 * day, 1<<45 - 1, 4194303},
		{limit.MaxPeriod, 1<<45 - 1, 4194303},
	} {
		g := slotExp(int64(tc.p))
		if f, s := int64(1)<<(g-4)-1, int64(1)<<slidingBits(g)-1; f != tc.fixed || s != tc.sliding {
			t.Errorf("period %v: packed counts up to %d (fixed), %d (sliding); docs say %d, %d", tc.p, f, s, tc.fixed, tc.sliding)
		}
	}
}

// TestKeyMovesBetweenWordAndMutex follows one SLIDING_WINDOW key whose
// count crosses the packed bound (127 for 1 ms) and comes back, and one
// FIXED_WINDOW key too short-lived to pack, through a sweep.
func TestKeyMovesBetweenWordAndMutex(t *testing.T) {
	t.Parallel()
	s := NewSliding(testCfg)
	r := limit.Rule{Algorithm: limit.SlidingWindow, Limit: 200, Period: time.Millisecond}
	ms := int64(time.Millisecond)
	base := alignedStart(time.Millisecond)
	form := func() (wide bool, state *cell) {
		e := s.t.Get("k", base)
		e.Mu.Lock()
		defer e.Mu.Unlock()
		return e.Word.Load() == wideWord, e.State
	}
	steps := []struct {
		name string
		now  int64
		hits int64
		wide bool
	}{
		{"t0: 100", base, 100, false},
		{"t0: 50 more", base, 50, true},
		{"t0+0.5ms: 0", base + ms/2, 0, true},
		{"t0+1ms: 10", base + ms, 10, true}, // prev 150 still too large
		{"t0+2ms: 10", base + 2*ms, 10, false},
		{"t0+3ms: 150", base + 3*ms, 150, true},
	}
	for _, st := range steps {
		if d := s.Take("k", st.now, r, st.hits); !d.Allowed {
			t.Fatalf("%s: Take = %+v, want admitted", st.name, d)
		}
		if wide, state := form(); wide != st.wide || wide != (state != nil) {
			t.Fatalf("%s: wide %v with state %v, want wide %v", st.name, wide, state, st.wide)
		}
	}
	f := NewFixed(testCfg)
	short := limit.Rule{Algorithm: limit.FixedWindow, Limit: 5, Period: 100 * time.Microsecond}
	f.Take("k", base, short, 3)
	if w := f.t.Get("k", base).Word.Load(); w != wideWord {
		t.Fatalf("fixed window of 100µs: word %#x, want wideWord", w)
	}
	if n := f.Sweep(base+sec/2, 100); n != 0 || f.Len() != 1 {
		t.Fatalf("Sweep within the idle slack removed %d, Len %d; want 0, 1", n, f.Len())
	}
	if n := f.Sweep(base+2*sec, 100); n != 1 || f.Len() != 0 {
		t.Fatalf("Sweep after the idle slack removed %d, Len %d; want 1, 0", n, f.Len())
	}
}

// TestSweep: each table keeps a key whose state still matters and retires
// it once it has been idle for the slack; a take after the sweep sees a
// fresh key.
func TestSweep(t *testing.T) {
	t.Parallel()
	// A window of a minute-long period is idle once no period of its
	// octave (up to 2^36 ns) can map its counts to a window still open at
	// now−idleSlack; a sliding window one such period later.
	g := slotExp(minute)
	fixedIdle := mappedEndBound(end0>>g, g) + idleSlack
	for _, tc := range []struct {
		l    limit.Limiter
		r    limit.Rule
		idle int64 // when the key below is idle for the sweep
	}{
		{NewFixed(testCfg), perMinute, fixedIdle},
		{NewSliding(testCfg), slidingMinute, fixedIdle + maxPeriodOf(g)},
		{NewLog(testCfg), logRule, t0 + 10*sec + idleSlack},
	} {
		tc.l.Take("k", t0, tc.r, 2)
		tc.l.Take("fresh", t0, tc.r, 0) // a peek at an unknown key stores nothing
		if tc.l.Len() != 1 {
			t.Fatalf("%v: Len %d after one take and one peek, want 1", tc.r.Algorithm, tc.l.Len())
		}
		if n := tc.l.Sweep(t0+sec/2, 1<<20); n != 0 || tc.l.Len() != 1 {
			t.Fatalf("%v: Sweep(t0+0.5s) removed %d, Len %d; want 0, 1", tc.r.Algorithm, n, tc.l.Len())
		}
		if n := tc.l.Sweep(tc.idle-1, 1<<20); n != 0 {
			t.Fatalf("%v: Sweep(idle−1ns) removed %d, want 0", tc.r.Algorithm, n)
		}
		if n := tc.l.Sweep(tc.idle, 1<<20); n != 1 || tc.l.Len() != 0 {
			t.Fatalf("%v: Sweep(idle) removed %d, Len %d; want 1, 0", tc.r.Algorithm, n, tc.l.Len())
		}
	}
}

// TestTakeAllocatesNothing: a decision on an existing key allocates
// nothing, on every table.
func TestTakeAllocatesNothing(t *testing.T) {
	for _, alg := range benchAlgs {
		l, r := newTable(alg, table.Config{}), benchRule(alg)
		now := t0
		l.Take("account:42", now, r, 1)
		allocs := testing.AllocsPerRun(1000, func() {
			now += benchStep
			l.Take("account:42", now, r, 1)
		})
		if allocs != 0 {
			t.Errorf("%v: Take on an existing key allocates %v times, want 0", alg, allocs)
		}
	}
}
