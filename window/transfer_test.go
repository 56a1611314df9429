package window

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"reflect"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/shardlimiter/shardlimiter/limit"
	"github.com/shardlimiter/shardlimiter/table"
)

// transferRules returns a base rule of alg and variants with the same
// period (another limit; for the log another minimum interval).
func transferRules(rng *rand.Rand, alg limit.Algorithm) []limit.Rule {
	periods := []time.Duration{600 * time.Microsecond, time.Millisecond, 100 * time.Millisecond, time.Second, time.Minute}
	r := limit.Rule{Algorithm: alg, Limit: 1 + rng.Int64N(20), Period: periods[rng.IntN(len(periods))]}
	more, other := r, r
	more.Limit = 2*r.Limit + 1
	if alg == limit.SlidingLog {
		other.MinInterval = r.Period / time.Duration(1+rng.IntN(10))
	} else {
		other.Limit = 40000 // overflows the packed counts of short periods
	}
	return []limit.Rule{r, r, more, other}
}

// playRandom takes on key n times at random instants in [from, to] under
// r: random hits up to the limit, some COUNT_REJECTED.
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
		l.Take(key, now, r, 1+rng.Int64N(min(r.Limit, 50)))
	}
}

// TestMergeNeverAdmitsMore is the merge's property: for random states a
// and b of one key, each reached by random takes under a rule of the
// algorithm (one period; the limit, or the log's minimum interval, may
// differ), the key that imported both admits no more hits than the key
// that imported a alone, or b alone, over the same sequence of checks of
// one size at increasing instants, under a rule of the algorithm. Imports
// run in both orders.
func TestMergeNeverAdmitsMore(t *testing.T) {
	t.Parallel()
	for _, alg := range benchAlgs {
		t.Run(alg.String(), func(t *testing.T) {
			t.Parallel()
			for seed := range uint64(3000) {
				checkMerge(t, alg, seed)
			}
		})
	}
}

func checkMerge(t *testing.T, alg limit.Algorithm, seed uint64) {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 9))
	rules := transferRules(rng, alg)
	p := int64(rules[0].Period)
	now := t0 + rng.Int64N(p)
	var states [2][]byte
	for i := range states {
		l := newTable(alg, testCfg)
		playRandom(rng, l, "k", rules[rng.IntN(len(rules))], now-3*p, now, 1+rng.IntN(12))
		states[i], _ = l.Export("k", now)
	}
	fromStates := func(order ...int) limit.Limiter {
		l := newTable(alg, testCfg)
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
	hits := 1 + rng.Int64N(min(r.Limit, 50))
	steps := 1 + rng.IntN(40)
	var admitted [4]int64
	at := now
	for range steps {
		at += rng.Int64N(p / 4)
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
	for _, alg := range benchAlgs {
		t.Run(alg.String(), func(t *testing.T) {
			t.Parallel()
			for seed := range uint64(500) {
				rng := rand.New(rand.NewPCG(seed, 13))
				rules := transferRules(rng, alg)
				src, dst := newTable(alg, testCfg), newTable(alg, testCfg)
				p := int64(rules[0].Period)
				now := t0 + rng.Int64N(p)
				playRandom(rng, src, "k", rules[rng.IntN(len(rules))], now-2*p, now, 1+rng.IntN(10))
				if st, ok := src.Export("k", now); ok {
					if err := dst.Import("k", st, now, true); err != nil {
						t.Fatalf("seed %d: Import(%x) = %v", seed, st, err)
					}
				}
				for i := range 30 {
					now += rng.Int64N(p / 3)
					r := rules[rng.IntN(len(rules))]
					h := rng.Int64N(min(r.Limit, 50) + 1)
					if got, want := dst.Take("k", now, r, h), src.Take("k", now, r, h); got != want {
						t.Fatalf("seed %d check %d: moved key Take(%d, %d) = %+v, original %+v", seed, i, now, h, got, want)
					}
				}
			}
		})
	}
}

// TestTransfersMatchReference drives an optimized table (tracking changes)
// and its reference with the same random operations, moves included:
// takes (from randomOps), a key's state exported and imported into
// another key (or the same), deletes, and drains of the changed keys.
// Exports must be byte for byte the same, and so must decisions and
// changed-key sets.
func TestTransfersMatchReference(t *testing.T) {
	t.Parallel()
	for _, alg := range benchAlgs {
		t.Run(alg.String(), func(t *testing.T) {
			t.Parallel()
			for seed := range uint64(40) {
				rng := rand.New(rand.NewPCG(seed, 17))
				opt := newTable(alg, table.Config{MaxKeys: 1 << 12, TrackChanges: true})
				ref := map[limit.Algorithm]limit.Limiter{
					limit.FixedWindow: newRefFixed(), limit.SlidingWindow: newRefSliding(), limit.SlidingLog: newRefLog(),
				}[alg]
				for i, o := range randomOps(rng, alg, 1500, false) {
					if o.sweep {
						continue // the reference sweeps by its own (documented) horizon
					}
					compareMove(t, seed, i, rng, opt, ref, o.now)
					if got, want := opt.Take(o.key, o.now, o.rule, o.hits), ref.Take(o.key, o.now, o.rule, o.hits); got != want {
						t.Fatalf("seed %d op %d: %v = %+v, reference %+v", seed, i, o, got, want)
					}
				}
			}
		})
	}
}

// compareMove sometimes moves a key's state, deletes a key or drains the
// changed keys, on both tables, and compares what they report.
func compareMove(t *testing.T, seed uint64, i int, rng *rand.Rand, opt, ref limit.Limiter, now int64) {
	t.Helper()
	keys := []string{"a", "b", "c"}
	switch rng.IntN(12) {
	case 0, 1:
		from, to := keys[rng.IntN(3)], keys[rng.IntN(3)]
		o, ook := opt.Export(from, now)
		r, rok := ref.Export(from, now)
		if ook != rok || !bytes.Equal(o, r) {
			t.Fatalf("seed %d op %d: Export(%q, %d) = %x, %v; reference %x, %v", seed, i, from, now, o, ook, r, rok)
		}
		if ook {
			if oe, re := opt.Import(to, o, now, true), ref.Import(to, r, now, true); oe != nil || re != nil {
				t.Fatalf("seed %d op %d: Import = %v, reference %v", seed, i, oe, re)
			}
		}
	case 2:
		k := keys[rng.IntN(3)]
		// The reference keeps keys a peek made; the optimized table does
		// not: only the state is compared, by the takes that follow.
		opt.Delete(k)
		ref.Delete(k)
	case 3:
		if o, r := changedKeys(opt), changedKeys(ref); fmt.Sprint(o) != fmt.Sprint(r) {
			t.Fatalf("seed %d op %d: Changed = %q, reference %q", seed, i, o, r)
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
	for _, alg := range benchAlgs {
		r := limit.Rule{Algorithm: alg, Limit: 2, Period: time.Second}
		counted := r
		counted.Behavior = limit.CountRejected
		now := alignedStart(time.Second)
		for _, im := range []impl{
			{"optimized", func() limit.Limiter { return newTable(alg, table.Config{MaxKeys: 64, TrackChanges: true}) }},
			{"reference", map[limit.Algorithm]func() limit.Limiter{
				limit.FixedWindow:   func() limit.Limiter { return newRefFixed() },
				limit.SlidingWindow: func() limit.Limiter { return newRefSliding() },
				limit.SlidingLog:    func() limit.Limiter { return newRefLog() },
			}[alg]},
		} {
			l := im.new()
			for _, s := range []struct {
				what string
				do   func()
				want []string
			}{
				{"an admitted take", func() { l.Take("a", now, r, 1) }, []string{"a"}},
				{"a peek", func() { l.Take("a", now, r, 0) }, nil},
				{"a rejected take", func() { l.Take("a", now, r, 2) }, nil},
				{"a counted rejection", func() { l.Take("a", now, counted, 2) }, []string{"a"}},
				{"an import that changes nothing", func() {
					st, _ := l.Export("a", now)
					_ = l.Import("a", st, now, true)
				}, nil},
				{"an import into an absent key", func() {
					st, _ := l.Export("a", now)
					_ = l.Import("c", st, now, true)
				}, []string{"c"}},
				{"a take, then a delete", func() { l.Take("d", now, r, 1); l.Delete("d") }, nil},
			} {
				s.do()
				if got := changedKeys(l); fmt.Sprint(got) != fmt.Sprint(s.want) {
					t.Errorf("%v %s: after %s, Changed handed out %q, want %q", alg, im.name, s.what, got, s.want)
				}
			}
		}
	}
}

func TestImportRejectsMalformedAndChangesNothing(t *testing.T) {
	t.Parallel()
	now := alignedStart(time.Second)
	for _, alg := range benchAlgs {
		l := newTable(alg, testCfg)
		r := limit.Rule{Algorithm: alg, Limit: 10, Period: time.Second}
		l.Take("a", now, r, 4)
		before := l.Take("a", now, r, 0)
		otherAlg := newTable(limit.SlidingWindow, testCfg)
		if alg == limit.SlidingWindow {
			otherAlg = newTable(limit.FixedWindow, testCfg)
		}
		otherAlg.Take("a", now, limit.Rule{Algorithm: limit.SlidingWindow, Limit: 10, Period: time.Second}, 9)
		wrong, _ := otherAlg.Export("a", now)
		for _, st := range [][]byte{nil, {1}, {1, byte(alg), 29}, wrong} {
			if err := l.Import("a", st, now, true); err == nil {
				t.Errorf("%v: Import(%x) = nil, want an error", alg, st)
			}
			if err := l.Import("new", st, now, true); err == nil || l.Len() != 1 {
				t.Errorf("%v: Import(%q, %x) = %v, Len %d; want an error, 1", alg, "new", st, err, l.Len())
			}
		}
		if got := l.Take("a", now, r, 0); got != before {
			t.Fatalf("%v: after malformed imports Take(%q, now, 0) = %+v, want %+v", alg, "a", got, before)
		}
	}
}

func TestDeleteForgetsTheKey(t *testing.T) {
	t.Parallel()
	now := alignedStart(time.Second)
	for _, alg := range benchAlgs {
		l := newTable(alg, testCfg)
		r := limit.Rule{Algorithm: alg, Limit: 2, Period: time.Second}
		l.Take("a", now, r, 2)
		if !l.Delete("a") || l.Delete("a") || l.Len() != 0 {
			t.Fatalf("%v: Delete twice: want true, then false with Len 0; Len %d", alg, l.Len())
		}
		if got := l.Take("a", now, r, 2); !got.Allowed {
			t.Fatalf("%v: Take after Delete = %+v, want a fresh key", alg, got)
		}
	}
}

// TestImportRacesTakes runs takes on one key from several goroutines while
// another keeps importing states of that key taken on a second table
// (whose counts also overflow the packed word, so imports move the key
// between the word and the mutex under the lock-free takers), drains its
// changes and deletes another key. Under -race. Imports only add counts,
// so the hot key's admissions keep the algorithm's bound: at most Limit in
// any window (FIXED_WINDOW, SLIDING_WINDOW's aligned windows), in any
// Period-long span (SLIDING_LOG).
func TestImportRacesTakes(t *testing.T) {
	t.Parallel()
	for _, alg := range benchAlgs {
		t.Run(alg.String(), func(t *testing.T) {
			t.Parallel()
			r := limit.Rule{Algorithm: alg, Limit: 100, Period: time.Millisecond}
			big := r
			big.Limit = 40000
			l := newTable(alg, table.Config{MaxKeys: 64, TrackChanges: true})
			src := newTable(alg, testCfg)
			const workers, takes, ticks = 4, 10, 200
			step := int64(r.Period) / 20
			start := alignedStart(r.Period)
			var mu sync.Mutex
			var admits []admit
			// Within a tick every call carries the same now, so the
			// outcome is that of some serial order; ticks move forward.
			for tick := range ticks {
				now := start + int64(tick)*step
				var wg sync.WaitGroup
				for range workers {
					wg.Go(func() {
						n := 0
						for range takes {
							if l.Take("k", now, r, 1).Allowed {
								n++
							}
						}
						mu.Lock()
						for range n {
							admits = append(admits, admit{now, 1})
						}
						mu.Unlock()
					})
				}
				wg.Go(func() {
					src.Take("k", now, big, 1+int64(tick%7))
					if st, ok := src.Export("k", now); ok && tick%2 == 0 {
						if err := l.Import("k", st, now, true); err != nil {
							t.Error(err)
						}
					}
					l.Changed(5, func(string) {})
					if tick%50 == 0 {
						l.Delete("other")
					}
				})
				wg.Wait()
			}
			sort.Slice(admits, func(i, j int) bool { return admits[i].at < admits[j].at })
			p := int64(r.Period)
			for i, a := range admits {
				// Hits in the window or span that a starts.
				end := a.at + p
				if alg != limit.SlidingLog {
					end = (a.at/p + 1) * p
				}
				n := 0
				for _, b := range admits[i:] {
					if b.at >= end {
						break
					}
					n++
				}
				if int64(n) > r.Limit {
					t.Fatalf("%d hits admitted in [%d, %d), want at most %d", n, a.at, end, r.Limit)
				}
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
// leaving out the keys Export would (forgotten again by now).
func TestExportChangedIsChangedThenExport(t *testing.T) {
	t.Parallel()
	cfg := table.Config{TrackChanges: true}
	for _, c := range []struct {
		alg limit.Algorithm
		l   changedExporter
	}{{limit.FixedWindow, NewFixed(cfg)}, {limit.SlidingWindow, NewSliding(cfg)}, {limit.SlidingLog, NewLog(cfg)}} {
		long := limit.Rule{Algorithm: c.alg, Limit: 10, Period: time.Hour}
		short := limit.Rule{Algorithm: c.alg, Limit: 10, Period: time.Millisecond}
		for i := range 20 {
			r := long
			if i%2 == 1 {
				r = short
			}
			c.l.Take(fmt.Sprint("k", i), t0, r, 1)
		}
		now := t0 + int64(time.Second)
		want := map[string]string{}
		for i := range 20 {
			k := fmt.Sprint("k", i)
			if st, ok := c.l.Export(k, now); ok {
				want[k] = string(st)
			}
		}
		if len(want) != 10 {
			t.Fatalf("%v: %d keys worth exporting, want the 10 of the hour-long rule", c.alg, len(want))
		}
		got := map[string]string{}
		n := c.l.ExportChanged(7, now, func(k string, st []byte) { got[k] = string(st) })
		n += c.l.ExportChanged(100, now, func(k string, st []byte) { got[k] = string(st) })
		if n != 20 || !reflect.DeepEqual(got, want) {
			t.Errorf("%v: ExportChanged drained %d keys and handed out %q; want 20 drained and %q", c.alg, n, got, want)
		}
		if n := c.l.ExportChanged(100, now, func(string, []byte) {}); n != 0 {
			t.Errorf("%v: ExportChanged after a full drain = %d, want 0", c.alg, n)
		}
	}
}

// TestImportEachIsImportOfEach imports the same states key by key into one
// table and at once into another (with a malformed state and a key twice
// among them): both end with the same states and the same marks.
func TestImportEachIsImportOfEach(t *testing.T) {
	t.Parallel()
	for _, alg := range []limit.Algorithm{limit.FixedWindow, limit.SlidingWindow} {
		t.Run(alg.String(), func(t *testing.T) {
			t.Parallel()
			rng := rand.New(rand.NewPCG(3, 5))
			r := limit.Rule{Algorithm: alg, Limit: 50, Period: time.Minute}
			now := t0 + int64(time.Second)
			src, prime := newTable(alg, testCfg), newTable(alg, testCfg)
			one, each := newTable(alg, testCfg), newTable(alg, testCfg)
			var states []limit.KeyState
			for i := range 400 {
				k := fmt.Sprint("k", i%350)
				playRandom(rng, src, k, r, t0, now, 1+rng.IntN(5))
				if i%3 == 0 {
					playRandom(rng, prime, k, r, t0, now, 1+rng.IntN(5))
					if st, ok := prime.(limit.StateMover).Export(k, now); ok {
						for _, l := range []limit.Limiter{one, each} {
							if err := l.(limit.StateMover).Import(k, st, now, false); err != nil {
								t.Fatal(err)
							}
						}
					}
				}
				if st, ok := src.(limit.StateMover).Export(k, now); ok {
					states = append(states, limit.KeyState{Algorithm: alg, Key: k, State: st})
				}
			}
			states = append(states, limit.KeyState{Algorithm: alg, Key: "bad", State: []byte{1}})
			a, b := one.(limit.StateMover), each.(limit.StateMover)
			a.TrackChanges(true)
			b.TrackChanges(true)
			for _, ks := range states {
				_ = a.Import(ks.Key, ks.State, now, true)
			}
			var bad []int
			each.(interface {
				ImportEach([]limit.KeyState, int64, bool, func(int, error))
			}).ImportEach(states, now, true, func(i int, err error) { bad = append(bad, i) })
			if want := []int{len(states) - 1}; !reflect.DeepEqual(bad, want) {
				t.Fatalf("ImportEach refused %v, want %v", bad, want)
			}
			var ma, mb []string
			a.Changed(1<<20, func(k string) { ma = append(ma, k) })
			b.Changed(1<<20, func(k string) { mb = append(mb, k) })
			sort.Strings(ma)
			sort.Strings(mb)
			if len(ma) < 100 || !reflect.DeepEqual(ma, mb) {
				t.Fatalf("marked keys differ: Import %d %v, ImportEach %d %v", len(ma), ma, len(mb), mb)
			}
			for i := range 350 {
				k := fmt.Sprint("k", i)
				x, okX := a.Export(k, now)
				y, okY := b.Export(k, now)
				if okX != okY || !bytes.Equal(x, y) {
					t.Fatalf("key %q: Import gives %x (%v), ImportEach %x (%v)", k, x, okX, y, okY)
				}
			}
		})
	}
}
