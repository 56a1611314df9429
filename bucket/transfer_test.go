package bucket

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"reflect"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shardlimiter/shardlimiter/limit"
	"github.com/shardlimiter/shardlimiter/table"
)

// mergeCase is one algorithm's rules for the transfer tests.
type mergeCase struct {
	name  string
	fresh func() limit.Limiter
	rules func(rng *rand.Rand) []limit.Rule // a base rule and variants of it
}

var mergeCases = []mergeCase{
	{"token", func() limit.Limiter { return NewTokenBucket(table.Config{}) }, func(rng *rand.Rand) []limit.Rule {
		r := limit.Rule{Limit: 1 + rng.Int64N(20), Period: time.Duration(1+rng.Int64N(20)) * 100 * ms}
		more, deeper := r, r
		more.Limit = r.Limit*2 + 1
		deeper.Burst = r.Limit + 1 + rng.Int64N(10)
		return []limit.Rule{r, r, more, deeper}
	}},
	{"warmup", func() limit.Limiter { return NewTokenBucket(table.Config{}) }, func(rng *rand.Rand) []limit.Rule {
		r := limit.Rule{Limit: 1 + rng.Int64N(20), Period: time.Duration(1+rng.Int64N(20)) * 100 * ms}
		r.Warmup = time.Duration(1+rng.Int64N(4)) * r.Period
		faster, longer := r, r
		faster.Limit = r.Limit*2 + 1
		longer.Warmup = 2 * r.Warmup
		return []limit.Rule{r, r, faster, longer}
	}},
	{"leaky", func() limit.Limiter { return NewLeakyBucket(table.Config{}) }, func(rng *rand.Rand) []limit.Rule {
		r := limit.Rule{Algorithm: limit.LeakyBucket, Limit: 1 + rng.Int64N(20), Period: time.Duration(1+rng.Int64N(20)) * 100 * ms, Burst: rng.Int64N(10)}
		faster, deeper := r, r
		faster.Limit = r.Limit*2 + 1
		deeper.Burst = r.Burst*2 + 1
		return []limit.Rule{r, r, faster, deeper}
	}},
}

// playRandom takes on key n times at random instants in [from, to] under
// rule r: random hits up to the capacity, some COUNT_REJECTED.
func playRandom(rng *rand.Rand, l limit.Limiter, key string, r limit.Rule, from, to int64, n int) {
	times := make([]int64, n)
	for i := range times {
		times[i] = from + rng.Int64N(to-from+1)
	}
	sort.Slice(times, func(i, j int) bool { return times[i] < times[j] })
	for _, now := range times {
		r.Behavior = 0
		if rng.IntN(4) == 0 {
			r.Behavior = limit.CountRejected
		}
		l.Take(key, now, r, 1+rng.Int64N(fuzzCapacity(r)))
	}
}

// TestMergeNeverAdmitsMore is the merge's property: for random states a
// and b of one key, each reached by random takes under a rule of the
// algorithm (the same one or a variant: another limit, capacity, queue or
// warm-up), the key that imported both admits no more hits than the key
// that imported a alone, or b alone, over the same sequence of checks of
// one size at increasing instants, under a rule of the algorithm. Imports
// run in both orders.
//
// The warm-up is monotone in a weaker sense (state.go): the property is
// checked for states that both took under the checks' rule, over up to 10
// checks, and otherwise for the first check, whose admission depends on
// the TAT alone.
func TestMergeNeverAdmitsMore(t *testing.T) {
	t.Parallel()
	for _, mc := range mergeCases {
		t.Run(mc.name, func(t *testing.T) {
			t.Parallel()
			for seed := range uint64(3000) {
				checkMerge(t, mc, seed)
			}
		})
	}
}

func checkMerge(t *testing.T, mc mergeCase, seed uint64) {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 7))
	rules := mc.rules(rng)
	now := t0
	span := 3 * int64(rules[0].Period)
	var states [2][]byte
	var played [2]limit.Rule
	for i := range states {
		l := mc.fresh()
		played[i] = rules[rng.IntN(len(rules))]
		playRandom(rng, l, "k", played[i], now-span, now, 1+rng.IntN(12))
		states[i], _ = l.Export("k", now)
	}
	if mc.name == "warmup" && (states[0] == nil || states[1] == nil) {
		return // a fresh key is fully cold: warmer than any used one
	}
	fromStates := func(order ...int) limit.Limiter {
		l := mc.fresh()
		for _, i := range order {
			if states[i] != nil {
				if err := l.Import("k", states[i], now, true); err != nil {
					t.Fatalf("seed %d: Import(%x) = %v", seed, states[i], err)
				}
			}
		}
		return l
	}
	tables := []limit.Limiter{fromStates(0), fromStates(1), fromStates(0, 1), fromStates(1, 0)}
	r := rules[rng.IntN(len(rules))]
	if rng.IntN(3) == 0 {
		r.Behavior = limit.CountRejected
	}
	hits := 1 + rng.Int64N(fuzzCapacity(r))
	steps := 1 + rng.IntN(40)
	if mc.name == "warmup" {
		steps = min(steps, 10)
		base := r
		base.Behavior = 0
		if played[0] != base || played[1] != base {
			steps = 1
		}
	}
	var admitted [4]int64
	at := now
	for range steps {
		at += rng.Int64N(int64(r.Period)) / 4
		for i, l := range tables {
			if l.Take("k", at, r, hits).Allowed {
				admitted[i] += hits
			}
		}
	}
	for _, m := range admitted[2:] {
		if m > admitted[0] || m > admitted[1] {
			t.Fatalf("seed %d: states %x and %x, %d checks of %d under %+v: merged admitted %d, a alone %d, b alone %d",
				seed, states[0], states[1], steps, hits, r, m, admitted[0], admitted[1])
		}
	}
}

// TestMoveKeepsDecisions: a key's state exported from one table and
// imported into an empty one decides every later check exactly as the
// original does: a handoff loses nothing.
func TestMoveKeepsDecisions(t *testing.T) {
	t.Parallel()
	for _, mc := range mergeCases {
		t.Run(mc.name, func(t *testing.T) {
			t.Parallel()
			for seed := range uint64(500) {
				rng := rand.New(rand.NewPCG(seed, 11))
				rules := mc.rules(rng)
				src, dst := mc.fresh(), mc.fresh()
				now := t0
				playRandom(rng, src, "k", rules[rng.IntN(len(rules))], now-int64(sec), now, 1+rng.IntN(10))
				if st, ok := src.Export("k", now); ok {
					if err := dst.Import("k", st, now, true); err != nil {
						t.Fatalf("seed %d: Import(%x) = %v", seed, st, err)
					}
				}
				for i := range 30 {
					now += rng.Int64N(int64(300 * ms))
					r := rules[rng.IntN(len(rules))]
					h := rng.Int64N(fuzzCapacity(r) + 1)
					if got, want := dst.Take("k", now, r, h), src.Take("k", now, r, h); got != want {
						t.Fatalf("seed %d check %d: moved key Take(%d, %d) = %+v, original %+v", seed, i, now, h, got, want)
					}
				}
			}
		})
	}
}

// TestTransfersMatchReference drives an optimized table (tracking changes)
// and the reference with the same random operations, moves included:
// takes, a key's state exported and imported into another key (or the
// same), deletes, sweeps and drains of the changed keys. Exports must be
// byte for byte the same, and so must decisions and changed-key sets.
func TestTransfersMatchReference(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		opt, ref func() limit.Limiter
		rules    []limit.Rule
	}{
		{"token", func() limit.Limiter { return NewTokenBucket(table.Config{TrackChanges: true}) }, func() limit.Limiter { return newRefTokenBucket() }, []limit.Rule{
			{Limit: 10, Period: sec}, {Limit: 10, Period: sec, Burst: 3}, {Limit: 10, Period: sec, Warmup: 2 * sec},
			{Limit: 3, Period: 700 * ms, Warmup: 5 * sec},
		}},
		{"leaky", func() limit.Limiter { return NewLeakyBucket(table.Config{TrackChanges: true}) }, func() limit.Limiter { return newRefLeakyBucket() }, []limit.Rule{
			{Algorithm: limit.LeakyBucket, Limit: 10, Period: sec}, {Algorithm: limit.LeakyBucket, Limit: 10, Period: sec, Burst: 4},
			{Algorithm: limit.LeakyBucket, Limit: 3, Period: 700 * ms, Burst: 9},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			for seed := range uint64(30) {
				compareTransfers(t, seed, tc.opt(), tc.ref(), tc.rules, 1500)
			}
		})
	}
}

func compareTransfers(t *testing.T, seed uint64, opt, ref limit.Limiter, rules []limit.Rule, n int) {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 5))
	now := t0
	key := func() string { return fmt.Sprint("k", rng.IntN(4)) }
	for i := range n {
		now += randomStep(rng)
		switch op := rng.IntN(20); {
		case op < 3:
			from, to := key(), key()
			o, ook := opt.Export(from, now)
			r, rok := ref.Export(from, now)
			if ook != rok || !bytes.Equal(o, r) {
				t.Fatalf("seed %d op %d: Export(%q) = %x, %v; reference %x, %v", seed, i, from, o, ook, r, rok)
			}
			if ook {
				if oe, re := opt.Import(to, o, now, true), ref.Import(to, r, now, true); oe != nil || re != nil {
					t.Fatalf("seed %d op %d: Import = %v, reference %v", seed, i, oe, re)
				}
			}
		case op == 3:
			k := key()
			if o, r := opt.Delete(k), ref.Delete(k); o != r {
				t.Fatalf("seed %d op %d: Delete(%q) = %v, reference %v", seed, i, k, o, r)
			}
		case op == 4:
			if o, r := opt.Sweep(now, 1<<20), ref.Sweep(now, 1<<20); o != r {
				t.Fatalf("seed %d op %d: Sweep = %d, reference %d", seed, i, o, r)
			}
		case op == 5:
			if o, r := changedKeys(opt), changedKeys(ref); fmt.Sprint(o) != fmt.Sprint(r) {
				t.Fatalf("seed %d op %d: Changed = %q, reference %q", seed, i, o, r)
			}
		default:
			k, r := key(), rules[rng.IntN(len(rules))]
			r.Behavior = randomBehavior(rng)
			h := int64(rng.IntN(int(fuzzCapacity(r)) + 2))
			if got, want := opt.Take(k, now, r, h), ref.Take(k, now, r, h); got != want {
				t.Fatalf("seed %d op %d: Take(%q, %d, %d) under %+v = %+v, reference %+v", seed, i, k, now, h, r, got, want)
			}
		}
	}
}

// changedKeys drains l's changed keys, sorted.
func changedKeys(l limit.Limiter) []string {
	var keys []string
	l.Changed(1<<20, func(k string) { keys = append(keys, k) })
	sort.Strings(keys)
	return keys
}

func TestChangedMarksOnlyChanges(t *testing.T) {
	t.Parallel()
	r := limit.Rule{Limit: 2, Period: sec}
	for _, im := range []impl{
		{"optimized", func() limit.Limiter { return NewTokenBucket(table.Config{TrackChanges: true}) }},
		{"reference", func() limit.Limiter { return newRefTokenBucket() }},
	} {
		l := im.new()
		steps := []struct {
			what string
			do   func()
			want []string
		}{
			{"an admitted take", func() { l.Take("a", t0, r, 1) }, []string{"a"}},
			{"a peek", func() { l.Take("a", t0, r, 0) }, nil},
			{"a peek at an absent key", func() { l.Take("b", t0, r, 0) }, nil},
			{"a rejected take", func() { l.Take("a", t0, r, 2) }, nil},
			{"a counted rejection", func() { l.Take("a", t0, limit.Rule{Limit: 2, Period: sec, Behavior: limit.CountRejected}, 2) }, []string{"a"}},
			{"a rule change by a peek", func() { l.Take("a", t0, limit.Rule{Limit: 4, Period: sec}, 0) }, []string{"a"}},
			{"an import that changes nothing", func() {
				st, _ := l.Export("a", t0)
				_ = l.Import("a", st, t0, true)
			}, nil},
			{"an import into an absent key", func() {
				st, _ := l.Export("a", t0)
				_ = l.Import("c", st, t0, true)
			}, []string{"c"}},
			{"a take, then a delete", func() { l.Take("d", t0, r, 1); l.Delete("d") }, nil},
		}
		for _, s := range steps {
			s.do()
			if got := changedKeys(l); fmt.Sprint(got) != fmt.Sprint(s.want) {
				t.Errorf("%s: after %s, Changed handed out %q, want %q", im.name, s.what, got, s.want)
			}
		}
	}
}

func TestImportRejectsMalformedAndChangesNothing(t *testing.T) {
	t.Parallel()
	tb := NewTokenBucket(table.Config{})
	r := limit.Rule{Limit: 10, Period: sec}
	tb.Take("a", t0, r, 5)
	leaky := NewLeakyBucket(table.Config{})
	leaky.Take("a", t0, limit.Rule{Algorithm: limit.LeakyBucket, Limit: 10, Period: sec, Burst: 5}, 3)
	wrongAlgorithm, _ := leaky.Export("a", t0)
	for _, st := range [][]byte{nil, {1}, {1, 0, 10, 10}, wrongAlgorithm} {
		if err := tb.Import("a", st, t0, true); err == nil {
			t.Errorf("Import(%x) = nil, want an error", st)
		}
		if err := tb.Import("new", st, t0, true); err == nil || tb.Len() != 1 {
			t.Errorf("Import(%q, %x) = %v, Len %d; want an error, 1", "new", st, err, tb.Len())
		}
	}
	if got, want := tb.Take("a", t0, r, 0), (limit.Decision{Allowed: true, Remaining: 5, ResetAt: t0 + int64(500*ms)}); got != want {
		t.Fatalf("after malformed imports Take(%q, t0, 0) = %+v, want %+v", "a", got, want)
	}
}

func TestImportRespectsKeyCap(t *testing.T) {
	t.Parallel()
	src, dst := NewTokenBucket(table.Config{}), NewTokenBucket(table.Config{MaxKeys: 10})
	r := limit.Rule{Limit: 10, Period: sec}
	for i := range 50 {
		k := fmt.Sprint("k", i)
		src.Take(k, t0, r, 1)
		st, _ := src.Export(k, t0)
		if err := dst.Import(k, st, t0+int64(i), true); err != nil {
			t.Fatal(err)
		}
	}
	if dst.Len() != 10 || dst.Evicted() != 40 {
		t.Fatalf("after 50 imports into a table of 10: Len %d, Evicted %d; want 10, 40", dst.Len(), dst.Evicted())
	}
}

func TestDeleteForgetsTheKey(t *testing.T) {
	t.Parallel()
	for _, im := range tokenImpls {
		l := im.new()
		r := limit.Rule{Limit: 2, Period: sec}
		l.Take("a", t0, r, 2)
		if !l.Delete("a") || l.Delete("a") || l.Len() != 0 {
			t.Fatalf("%s: Delete twice = true, false with Len 0 expected; Len %d", im.name, l.Len())
		}
		if got := l.Take("a", t0, r, 2); !got.Allowed {
			t.Fatalf("%s: Take after Delete = %+v, want a fresh key's full bucket", im.name, got)
		}
	}
}

// TestImportRacesTakes runs takes on one key from several goroutines while
// another keeps importing states of that key exported by a second table
// that takes under another rule (so imports move the rule back and forth
// under the lock-free takers). Under -race. Imports only ever add
// consumption, and each side's state is bounded, so admitted hits stay
// within the bound of the largest capacity plus the refill of the fastest
// rule.
func TestImportRacesTakes(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		l, src limit.Limiter
		r, o   limit.Rule
	}{
		{"token", NewTokenBucket(table.Config{TrackChanges: true}), NewTokenBucket(table.Config{}),
			limit.Rule{Limit: 100, Period: sec, Burst: 20}, limit.Rule{Limit: 50, Period: sec, Burst: 40}},
		{"warmup", NewTokenBucket(table.Config{TrackChanges: true}), NewTokenBucket(table.Config{}),
			limit.Rule{Limit: 100, Period: sec, Burst: 20, Warmup: sec}, limit.Rule{Limit: 100, Period: sec, Burst: 20}},
		{"leaky", NewLeakyBucket(table.Config{TrackChanges: true}), NewLeakyBucket(table.Config{}),
			limit.Rule{Algorithm: limit.LeakyBucket, Limit: 100, Period: sec, Burst: 5}, limit.Rule{Algorithm: limit.LeakyBucket, Limit: 50, Period: sec, Burst: 10}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			const workers, ticks = 4, 2000
			step := int64(ms) // 2s of simulated time
			var admitted atomic.Int64
			var clock atomic.Int64
			clock.Store(t0)
			var wg sync.WaitGroup
			for range workers {
				wg.Go(func() {
					for range ticks {
						now := clock.Add(step / workers)
						if tc.l.Take("k", now, tc.r, 1).Allowed {
							admitted.Add(1)
						}
					}
				})
			}
			wg.Go(func() {
				for i := range ticks {
					now := clock.Load()
					tc.src.Take("k", now, tc.o, 1)
					if st, ok := tc.src.Export("k", now); ok && i%3 == 0 {
						if err := tc.l.Import("k", st, now, true); err != nil {
							t.Error(err)
						}
					}
					tc.l.Changed(10, func(string) {})
					if i%100 == 0 {
						tc.l.Delete("other")
					}
				}
			})
			wg.Wait()
			span := clock.Load() - t0
			capacity := max(fuzzCapacity(tc.r), fuzzCapacity(tc.o))
			bound := capacity + span*tc.r.Limit/int64(tc.r.Period) + 1
			if got := admitted.Load(); got > bound {
				t.Fatalf("admitted %d hits in %v, want at most %d", got, time.Duration(span), bound)
			}
		})
	}
}

// changedExporter is the replication path of the tables: Changed and
// Export in one pass over the change list.
type changedExporter interface {
	limit.Limiter
	ExportChanged(max int, now int64, fn func(key string, state []byte)) int
}

// TestExportChangedIsChangedThenExport: ExportChanged drains what Changed
// would, and hands out each key's state exactly as Export returns it,
// leaving out the keys Export would (fresh again by now).
func TestExportChangedIsChangedThenExport(t *testing.T) {
	t.Parallel()
	for _, l := range []changedExporter{NewTokenBucket(table.Config{TrackChanges: true}), NewLeakyBucket(table.Config{TrackChanges: true})} {
		long, short := limit.Rule{Limit: 10, Period: time.Hour}, limit.Rule{Limit: 10, Period: time.Millisecond}
		for i := range 20 {
			r := long
			if i%2 == 1 {
				r = short // full again a second later: nothing to move
			}
			l.Take(fmt.Sprint("k", i), t0, r, 1)
		}
		now := t0 + int64(time.Second)
		want := map[string]string{}
		for i := 0; i < 20; i += 2 {
			k := fmt.Sprint("k", i)
			st, ok := l.Export(k, now)
			if !ok {
				t.Fatalf("Export(%q) of a key an hour-long rule took = not ok", k)
			}
			want[k] = string(st)
		}
		got := map[string]string{}
		n := l.ExportChanged(7, now, func(k string, st []byte) { got[k] = string(st) })
		n += l.ExportChanged(100, now, func(k string, st []byte) { got[k] = string(st) })
		if n != 20 || !reflect.DeepEqual(got, want) {
			t.Errorf("ExportChanged drained %d keys and handed out %q; want 20 drained and %q", n, got, want)
		}
		if n := l.ExportChanged(100, now, func(string, []byte) {}); n != 0 {
			t.Errorf("ExportChanged after a full drain = %d, want 0", n)
		}
	}
}

// TestExportChangedStatesStayValid keeps every state ExportChanged hands
// out (more than fill one of its shared buffers) and appends to each: none
// is overwritten by a later one, and appending to one does not write into
// the next.
func TestExportChangedStatesStayValid(t *testing.T) {
	t.Parallel()
	l := NewTokenBucket(table.Config{TrackChanges: true})
	r := limit.Rule{Limit: 1000, Period: time.Hour}
	const keys = 5000
	want := map[string]string{}
	for i := range keys {
		k := fmt.Sprint("k", i)
		l.Take(k, t0, r, int64(1+i%900))
		st, _ := l.Export(k, t0)
		want[k] = string(st)
	}
	got := map[string][]byte{}
	l.ExportChanged(keys, t0, func(k string, st []byte) { got[k] = st })
	if len(got) != keys {
		t.Fatalf("ExportChanged handed out %d states, want %d", len(got), keys)
	}
	for _, st := range got {
		_ = append(st, 0xff, 0xff) // must not reach the next state
	}
	for k, st := range got {
		if string(st) != want[k] {
			t.Fatalf("state of %q = %x after the drain, want %x", k, st, want[k])
		}
	}
}

// TestImportEachIsImportOfEach imports the same states key by key into one
// table and at once into another (with malformed states, fresh states and
// a key twice among them): both end with the same states and the same
// marks, and ImportEach reports exactly the malformed ones.
func TestImportEachIsImportOfEach(t *testing.T) {
	t.Parallel()
	for _, tc := range mergeCases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			rng := rand.New(rand.NewPCG(7, 11))
			rules := tc.rules(rng)
			src, prime := tc.fresh(), tc.fresh()
			one, each := tc.fresh().(interface {
				limit.StateMover
				limit.Limiter
			}), tc.fresh()
			var states []limit.KeyState
			for i := range 400 {
				k := fmt.Sprint("k", i%350) // keys 0..49 twice
				r := rules[i%len(rules)]
				playRandom(rng, src, k, r, t0, t0+int64(sec), 1+rng.IntN(5))
				if i%3 == 0 { // the receivers hold some keys already, the same states
					playRandom(rng, prime, k, r, t0, t0+int64(sec), 1+rng.IntN(5))
					if st, ok := prime.(limit.StateMover).Export(k, t0+int64(sec)); ok {
						for _, l := range []limit.Limiter{one, each} {
							if err := l.(limit.StateMover).Import(k, st, t0+int64(sec), false); err != nil {
								t.Fatal(err)
							}
						}
					}
				}
				st, ok := src.(limit.StateMover).Export(k, t0+int64(sec))
				if !ok {
					continue
				}
				states = append(states, limit.KeyState{Key: k, State: st})
			}
			states = append(states, limit.KeyState{Key: "bad", State: []byte{1}}, limit.KeyState{Key: "k1", State: nil})
			one.TrackChanges(true)
			each.(limit.StateMover).TrackChanges(true)
			now := t0 + int64(sec) + int64(ms)
			for _, ks := range states {
				_ = one.Import(ks.Key, ks.State, now, true)
			}
			var bad []int
			each.(interface {
				ImportEach([]limit.KeyState, int64, bool, func(int, error))
			}).ImportEach(states, now, true, func(i int, err error) {
				if err == nil {
					t.Errorf("bad(%d, nil)", i)
				}
				bad = append(bad, i)
			})
			sort.Ints(bad)
			if want := []int{len(states) - 2, len(states) - 1}; !reflect.DeepEqual(bad, want) {
				t.Fatalf("ImportEach refused %v, want %v", bad, want)
			}
			markedOne, markedEach := drainSorted(one), drainSorted(each.(limit.StateMover))
			if len(markedOne) < 100 || !reflect.DeepEqual(markedOne, markedEach) {
				t.Fatalf("marked keys differ: Import %v, ImportEach %v", markedOne, markedEach)
			}
			for i := range 350 {
				k := fmt.Sprint("k", i)
				a, okA := one.Export(k, now)
				b, okB := each.(limit.StateMover).Export(k, now)
				if okA != okB || !bytes.Equal(a, b) {
					t.Fatalf("key %q: Import gives %x (%v), ImportEach %x (%v)", k, a, okA, b, okB)
				}
			}
			if one.(interface{ Len() int }).Len() != each.(interface{ Len() int }).Len() {
				t.Fatal("the two tables hold different key counts")
			}
		})
	}
}

func drainSorted(m limit.StateMover) []string {
	var keys []string
	m.Changed(1<<20, func(k string) { keys = append(keys, k) })
	sort.Strings(keys)
	return keys
}
