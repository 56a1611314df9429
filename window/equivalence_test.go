package window

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/shardlimiter/shardlimiter/limit"
)

// op is one step of a random sequence: a take, or a sweep.
type op struct {
	key   string
	now   int64
	rule  limit.Rule
	hits  int64
	sweep bool
}

func (o op) String() string {
	if o.sweep {
		return fmt.Sprintf("Sweep(%d)", o.now)
	}
	return fmt.Sprintf("Take(%q, %d, {L %d P %v MI %v B %d}, %d)",
		o.key, o.now, o.rule.Limit, o.rule.Period, o.rule.MinInterval, o.rule.Behavior, o.hits)
}

// Periods of the random rules: 100µs packs in no word; 600µs, 800µs and
// 1ms share an octave (period changes among them map counts by slot).
var randomPeriods = []time.Duration{
	100 * time.Microsecond, 600 * time.Microsecond, 800 * time.Microsecond, time.Millisecond,
	100 * time.Millisecond, 300 * time.Millisecond, time.Second, time.Minute,
}

// randomRule draws a rule of algorithm alg. Limits 200 and 40000 overflow
// the packed counts of short periods (sliding, fixed), so keys move
// between the word and the mutex.
func randomRule(rng *rand.Rand, alg limit.Algorithm) limit.Rule {
	limits := []int64{1, 3, 10, 10, 200, 40000, limit.MaxLimit}
	if alg == limit.SlidingLog {
		limits = []int64{1, 3, 10, 10, 50}
	}
	r := limit.Rule{
		Algorithm: alg,
		Limit:     limits[rng.IntN(len(limits))],
		Period:    randomPeriods[rng.IntN(len(randomPeriods))],
	}
	if alg == limit.SlidingLog && rng.IntN(3) == 0 {
		r.MinInterval = []time.Duration{50 * time.Microsecond, 200 * time.Microsecond, 2 * time.Millisecond}[rng.IntN(3)]
	}
	if rng.IntN(4) == 0 {
		r.Behavior |= limit.CountRejected
	}
	if rng.IntN(40) == 0 {
		r.Behavior |= limit.Reset
	}
	return r
}

func randomHits(rng *rand.Rand, lim int64) int64 {
	switch x := rng.IntN(20); {
	case x < 2:
		return 0
	case x < 12:
		return 1
	case x < 17:
		return 2 + rng.Int64N(4)
	case x < 18:
		return lim
	case x < 19:
		return lim + 1
	}
	return rng.Int64N(min(lim, 50000) + 1)
}

// randomOps draws n ops on 3 keys, each key keeping its rule for a while.
// With sweeps, time never steps back more than 500 ms behind the latest
// instant, so no take is older than a sweep by more than idleSlack; wild
// sequences have no sweeps and jump anywhere in int64.
func randomOps(rng *rand.Rand, alg limit.Algorithm, n int, wild bool) []op {
	keys := []string{"a", "b", "c"}
	rules := map[string]limit.Rule{}
	for _, k := range keys {
		rules[k] = randomRule(rng, alg)
	}
	now, latest := t0, t0
	ops := make([]op, 0, n)
	for range n {
		k := keys[rng.IntN(len(keys))]
		if rng.IntN(30) == 0 {
			rules[k] = randomRule(rng, alg)
		}
		r := rules[k]
		p := int64(r.Period)
		switch x := rng.IntN(100); {
		case x < 70:
			now += rng.Int64N(p/4 + 1)
		case x < 85:
			now += rng.Int64N(3*p + 1)
		case x < 97:
			now -= min(rng.Int64N(2*p+1), 500*int64(time.Millisecond))
			now = max(now, latest-500*int64(time.Millisecond))
		case wild:
			now = []int64{math.MinInt64, -1, 0, MaxTime, math.MaxInt64, t0}[rng.IntN(6)]
		default:
			ops = append(ops, op{now: latest, sweep: true})
			continue
		}
		latest = max(latest, now)
		take := op{key: k, now: now, rule: r, hits: randomHits(rng, r.Limit)}
		ops = append(ops, take)
		if r.Behavior.Has(limit.Reset) {
			r.Behavior &^= limit.Reset
			rules[k] = r
		}
	}
	return ops
}

// TestOptimizedMatchesReference drives each optimized table and its
// reference with the same random sequences and requires identical
// decisions. Only the optimized table is swept: a sweep must never change
// a decision of a take at most idleSlack older than the sweep.
func TestOptimizedMatchesReference(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		alg   limit.Algorithm
		impls []impl
	}{
		{limit.FixedWindow, fixedImpls()},
		{limit.SlidingWindow, slidingImpls()},
		{limit.SlidingLog, logImpls()},
	} {
		t.Run(tc.alg.String(), func(t *testing.T) {
			t.Parallel()
			rng := rand.New(rand.NewPCG(1, uint64(tc.alg)))
			for seq := range 30 {
				ops := randomOps(rng, tc.alg, 1500, seq%3 == 2)
				opt, ref := tc.impls[0].new(), tc.impls[1].new()
				for i, o := range ops {
					if o.sweep {
						opt.Sweep(o.now, math.MaxInt)
						continue
					}
					got := opt.Take(o.key, o.now, o.rule, o.hits)
					want := ref.Take(o.key, o.now, o.rule, o.hits)
					if got != want {
						t.Fatalf("sequence %d, op %d: %v = %+v, reference %+v\nprevious ops: %v", seq, i, o, got, want, ops[max(0, i-8):i])
					}
				}
			}
		})
	}
}

// TestWideAndPackedBothExercised checks that the random sequences move keys
// through both representations, so the equivalence above covers both.
func TestWideAndPackedBothExercised(t *testing.T) {
	t.Parallel()
	for _, alg := range []limit.Algorithm{limit.FixedWindow, limit.SlidingWindow} {
		rng := rand.New(rand.NewPCG(1, uint64(alg)))
		var tab interface {
			Take(string, int64, limit.Rule, int64) limit.Decision
		}
		f, s := NewFixed(testCfg), NewSliding(testCfg)
		tab = f
		words := f.t
		if alg == limit.SlidingWindow {
			tab, words = s, s.t
		}
		wide, packed, toWord := 0, 0, 0
		for seq := range 10 {
			wasWide := map[string]bool{}
			for _, o := range randomOps(rng, alg, 1500, seq%3 == 2) {
				if o.sweep {
					continue
				}
				tab.Take(o.key, o.now, o.rule, o.hits)
				w := words.Get(o.key, o.now).Word.Load()
				switch {
				case w == wideWord:
					wide++
				case w != 0:
					packed++
					if wasWide[o.key] {
						toWord++
					}
				}
				wasWide[o.key] = w == wideWord
			}
		}
		if wide < 100 || packed < 100 || toWord < 10 {
			t.Errorf("%v: %d wide, %d packed states, %d returns to the word; want each exercised", alg, wide, packed, toWord)
		}
	}
}

// TestRetryAfterExact replays random sequences through the pure decisions
// and, after every rejection, probes the key's new state: the same check
// (without Reset or CountRejected) must be rejected 1 ns before
// now+RetryAfter and admitted at it.
func TestRetryAfterExact(t *testing.T) {
	t.Parallel()
	type decideFunc func(c cell, now int64, r limit.Rule, hits int64) (cell, limit.Decision)
	for _, alg := range []limit.Algorithm{limit.FixedWindow, limit.SlidingWindow, limit.SlidingLog} {
		rng := rand.New(rand.NewPCG(2, uint64(alg)))
		decide := decideFunc(decideFixed)
		if alg == limit.SlidingWindow {
			decide = decideSliding
		}
		cells, logs := map[string]cell{}, map[string]*logState{}
		probes := 0
		for seq := range 20 {
			clear(cells)
			clear(logs)
			for _, o := range randomOps(rng, alg, 1500, seq%3 == 2) {
				if o.sweep {
					continue
				}
				var d limit.Decision
				var probe func(now int64) bool
				plain := o.rule
				plain.Behavior = 0
				if alg == limit.SlidingLog {
					s := logs[o.key]
					if s == nil {
						s = &logState{}
						logs[o.key] = s
					}
					d = s.take(o.now, o.rule, o.hits)
					probe = func(now int64) bool { return s.clone().take(now, plain, o.hits).Allowed }
				} else {
					var c cell
					c, d = decide(cells[o.key], o.now, o.rule, o.hits)
					cells[o.key] = c
					probe = func(now int64) bool { _, d := decide(c, now, plain, o.hits); return d.Allowed }
				}
				if d.Allowed || d.RetryAfter == limit.Never || o.now != clampTime(o.now) {
					continue
				}
				at := o.now + int64(d.RetryAfter)
				if at > MaxTime {
					continue // time stands still at MaxTime
				}
				if d.RetryAfter <= 0 || probe(at-1) || !probe(at) {
					t.Fatalf("%v: %v = %+v: at now+RetryAfter-1 admitted %v, at now+RetryAfter admitted %v; want false, true",
						alg, o, d, probe(at-1), probe(at))
				}
				probes++
			}
		}
		if probes < 1000 {
			t.Errorf("%v: only %d rejections probed", alg, probes)
		}
	}
}

// clone returns a deep copy of s.
func (s *logState) clone() *logState {
	c := *s
	c.buf = append(s.buf[:0:0], s.buf...)
	return &c
}
