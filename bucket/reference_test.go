package bucket

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/shardlimiter/shardlimiter/limit"
	"github.com/shardlimiter/shardlimiter/table"
)

// refBucket is the reference implementation of both tables: one map, one
// mutex, each key's state unpacked into plain fields. It shares the pure
// decision functions (rate.take, warmRate.take, rescale, the idle tests)
// with the optimized tables, so comparing the two checks what the
// optimized tables add: the packed rule identity, the lock-free CAS path,
// the rule-change fence, the warm-up under the entry mutex, retirement.
// The arithmetic itself is checked by the step tables.
type refBucket struct {
	leaky bool
	mu    sync.Mutex
	keys  map[string]*refKey
}

type refKey struct {
	tat    int64
	rule   rate // zero for a fresh key
	warm   bool // tat was computed under a warm-up rule
	stored float64
	maxp   float64 // 0 until the key first runs with a warm-up
}

func newRefTokenBucket() *refBucket { return &refBucket{keys: map[string]*refKey{}} }
func newRefLeakyBucket() *refBucket { return &refBucket{leaky: true, keys: map[string]*refKey{}} }

func (b *refBucket) Take(key string, now int64, r limit.Rule, hits int64) limit.Decision {
	now = clampNow(now)
	b.mu.Lock()
	defer b.mu.Unlock()
	k := b.keys[key]
	if k == nil {
		k = &refKey{}
		if hits > 0 { // a peek at an unknown key stores nothing
			b.keys[key] = k
		}
	}
	p, warm := tokenRate(r), r.Warmup > 0
	if b.leaky {
		p, warm = leakyRate(r), false
	}
	if k.rule != (rate{}) && (k.rule != p || k.warm != warm) {
		k.tat = rescale(k.tat, now, k.rule, p)
	}
	k.rule, k.warm = p, warm
	reset, counted := r.Behavior.Has(limit.Reset), r.Behavior.Has(limit.CountRejected)
	if warm {
		return k.takeWarm(newWarmRate(r), now, hits, reset, counted)
	}
	tat := k.tat
	if reset {
		tat = 0
	}
	var v verdict
	k.tat, v = p.take(tat, now, hits, counted)
	return p.decision(now, v)
}

func (k *refKey) takeWarm(w warmRate, now, hits int64, reset, counted bool) limit.Decision {
	switch {
	case k.maxp == 0:
		k.stored, k.maxp = w.maxp, w.maxp
	case k.maxp != w.maxp:
		k.stored, k.maxp = k.stored/k.maxp*w.maxp, w.maxp
	}
	tat, stored := k.tat, k.stored
	if reset {
		tat, stored = 0, w.maxp
	}
	var v verdict
	k.tat, k.stored, v = w.take(tat, stored, now, hits, counted)
	return w.decision(now, v)
}

func (b *refBucket) Sweep(now int64, budget int) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	removed := 0
	for key, k := range b.keys {
		if budget--; budget < 0 {
			break
		}
		idle := idleWord(k.tat, now)
		if k.warm {
			idle = idleCold(k.tat, k.stored, k.maxp, k.rule, now)
		}
		if idle {
			delete(b.keys, key)
			removed++
		}
	}
	return removed
}

func (b *refBucket) Len() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.keys)
}

func (b *refBucket) Evicted() uint64 { return 0 }

// impl names a way to build a limiter for the shared tests and benchmarks.
type impl struct {
	name string
	new  func() limit.Limiter
}

var (
	tokenImpls = []impl{
		{"optimized", func() limit.Limiter { return NewTokenBucket(table.Config{}) }},
		{"reference", func() limit.Limiter { return newRefTokenBucket() }},
	}
	leakyImpls = []impl{
		{"optimized", func() limit.Limiter { return NewLeakyBucket(table.Config{}) }},
		{"reference", func() limit.Limiter { return newRefLeakyBucket() }},
	}
)

// TestOptimizedMatchesReference drives an optimized table and the reference
// with the same random operation sequences (keys, hits, peeks, resets,
// count-rejected, rule changes including warm-up on and off, time steps
// forward and back, sweeps) and requires identical decisions. The warm-up
// floats are computed by the same function on the same inputs in the same
// order, so exact equality holds for them too.
func TestOptimizedMatchesReference(t *testing.T) {
	t.Parallel()
	tokenRules := []limit.Rule{
		{Limit: 10, Period: time.Second},
		{Limit: 10, Period: time.Second, Burst: 3},
		{Limit: 7, Period: time.Second, Burst: 20},
		{Limit: 1_000_000_000, Period: time.Millisecond},
		{Limit: 10, Period: time.Second, Warmup: 2 * time.Second},
		{Limit: 10, Period: time.Second, Warmup: 2 * time.Second, Burst: 1},
		{Limit: 3, Period: 700 * time.Millisecond, Warmup: 5 * time.Second},
	}
	leakyRules := []limit.Rule{
		{Algorithm: limit.LeakyBucket, Limit: 10, Period: time.Second},
		{Algorithm: limit.LeakyBucket, Limit: 10, Period: time.Second, Burst: 4},
		{Algorithm: limit.LeakyBucket, Limit: 3, Period: 700 * time.Millisecond, Burst: 9},
		{Algorithm: limit.LeakyBucket, Limit: 1_000_000_000, Period: time.Millisecond, Burst: 1000},
	}
	for _, tc := range []struct {
		name  string
		opt   limit.Limiter
		ref   limit.Limiter
		rules []limit.Rule
	}{
		{"token", NewTokenBucket(table.Config{}), newRefTokenBucket(), tokenRules},
		{"leaky", NewLeakyBucket(table.Config{}), newRefLeakyBucket(), leakyRules},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			for seed := range uint64(20) {
				compareRandom(t, seed, tc.opt, tc.ref, tc.rules, 2000)
			}
		})
	}
}

// compareRandom runs n random operations on opt and ref and fails at the
// first difference.
func compareRandom(t *testing.T, seed uint64, opt, ref limit.Limiter, rules []limit.Rule, n int) {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 42))
	now := t0 + int64(seed)*int64(time.Hour)
	for i := range n {
		now += randomStep(rng)
		if rng.IntN(50) == 0 {
			o, r := opt.Sweep(now, 1<<30), ref.Sweep(now, 1<<30)
			if o != r || opt.Len() != ref.Len() {
				t.Fatalf("seed %d op %d: Sweep removed %d (Len %d), reference %d (Len %d)", seed, i, o, opt.Len(), r, ref.Len())
			}
			continue
		}
		key := fmt.Sprint("account:", rng.IntN(4))
		rule := rules[rng.IntN(len(rules))]
		rule.Behavior = randomBehavior(rng)
		hits := int64(rng.IntN(int(min(rule.Capacity(), 20)) + 3))
		got, want := opt.Take(key, now, rule, hits), ref.Take(key, now, rule, hits)
		if got != want {
			t.Fatalf("seed %d op %d: Take(%q, %d, %d) under %+v = %+v, reference %+v", seed, i, key, now, hits, rule, got, want)
		}
	}
}

// randomStep is a time step: mostly small and forward, sometimes long
// (keys go idle and cold), sometimes backwards.
func randomStep(rng *rand.Rand) int64 {
	switch rng.IntN(20) {
	case 0:
		return -rng.Int64N(int64(2 * time.Second))
	case 1:
		return rng.Int64N(int64(10 * time.Second))
	case 2:
		return 0
	}
	return rng.Int64N(int64(200 * time.Millisecond))
}

func randomBehavior(rng *rand.Rand) limit.Behavior {
	var b limit.Behavior
	if rng.IntN(30) == 0 {
		b |= limit.Reset
	}
	if rng.IntN(4) == 0 {
		b |= limit.CountRejected
	}
	return b
}
