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
	leaky   bool
	mu      sync.Mutex
	keys    map[string]*refKey
	changed map[string]bool // keys changed since Changed last handed them out
}

type refKey struct {
	tat    int64
	rule   rate // zero for a fresh key
	warm   bool // tat was computed under a warm-up rule
	stored float64
	maxp   float64 // 0 until the key first runs with a warm-up
}

func newRefTokenBucket() *refBucket {
	return &refBucket{keys: map[string]*refKey{}, changed: map[string]bool{}}
}

func newRefLeakyBucket() *refBucket {
	return &refBucket{leaky: true, keys: map[string]*refKey{}, changed: map[string]bool{}}
}

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
	before := *k
	defer func() {
		if *k != before && b.keys[key] == k {
			b.changed[key] = true
		}
	}()
	p, warm := tokenRate(r), r.Warmup > 0
	if b.leaky {
		p, warm = leakyRate(r), false
	}
	if k.rule != (rate{}) && (k.rule != p || k.warm != warm) {
		k.tat = rescale(k.tat, now, k.rule, p)
	}
	k.rule, k.warm = p, warm
	reset := r.Behavior.Has(limit.Reset)
	if warm {
		return k.takeWarm(newWarmRate(r), now, hits, reset, r.Behavior)
	}
	tat := k.tat
	if reset {
		tat = 0
	}
	var v verdict
	k.tat, v = p.take(tat, now, hits, r.Behavior)
	return p.decision(now, v)
}

func (k *refKey) takeWarm(w warmRate, now, hits int64, reset bool, b limit.Behavior) limit.Decision {
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
	k.tat, k.stored, v = w.take(tat, stored, now, hits, b)
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
			delete(b.changed, key)
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

// image returns k's state as it moves between nodes.
func (b *refBucket) image(k *refKey) keyImage {
	if k.rule == (rate{}) {
		return keyImage{shaping: b.leaky}
	}
	s := keyImage{shaping: b.leaky, limit: k.rule.limit, cap: k.rule.capacity, period: k.rule.period, tat: k.tat}
	if k.warm {
		s.warm, s.stored, s.maxp = true, k.stored, k.maxp
	}
	return s
}

func (b *refBucket) Export(key string, now int64) ([]byte, bool) {
	now = clampNow(now)
	b.mu.Lock()
	defer b.mu.Unlock()
	k := b.keys[key]
	if k == nil || b.image(k).freshAt(now) {
		return nil, false
	}
	return encodeImage(b.image(k)), true
}

func (b *refBucket) Import(key string, state []byte, now int64, mark bool) error {
	in, err := decodeImage(state, b.leaky)
	if err != nil {
		return err
	}
	now = clampNow(now)
	if in.freshAt(now) {
		return nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	k := b.keys[key]
	if k == nil {
		k = &refKey{}
		b.keys[key] = k
	}
	local := b.image(k)
	m := mergeImages(local, in, now)
	if m == local {
		return nil
	}
	k.tat, k.rule, k.warm = m.tat, m.rate(), m.warm
	k.stored, k.maxp = m.stored, m.maxp // maxp 0 without warm-up state
	b.changed[key] = true
	return nil
}

func (b *refBucket) Range(fn func(key string) bool) {
	b.mu.Lock()
	keys := make([]string, 0, len(b.keys))
	for k := range b.keys {
		keys = append(keys, k)
	}
	b.mu.Unlock()
	for _, k := range keys {
		if !fn(k) {
			return
		}
	}
}

func (b *refBucket) Delete(key string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	_, ok := b.keys[key]
	delete(b.keys, key)
	delete(b.changed, key)
	return ok
}

// TrackChanges does nothing: the reference always tracks.
func (b *refBucket) TrackChanges(bool) {}

func (b *refBucket) Changed(max int, fn func(key string)) int {
	b.mu.Lock()
	var keys []string
	for k := range b.changed {
		if len(keys) == max {
			break
		}
		keys = append(keys, k)
		delete(b.changed, k)
	}
	b.mu.Unlock()
	for _, k := range keys {
		fn(k)
	}
	return len(keys)
}

// impl names a way to build a limiter for the shared tests and benchmarks.
type impl struct {
	name string
	new  func() limit.Limiter
}

var (
	tokenImpls = []impl{
		{"optimized", func() limit.Limiter { return NewTokenBucket(table.Config{}) }},
		{"tracked", func() limit.Limiter { return NewTokenBucket(table.Config{TrackChanges: true}) }},
		{"reference", func() limit.Limiter { return newRefTokenBucket() }},
	}
	leakyImpls = []impl{
		{"optimized", func() limit.Limiter { return NewLeakyBucket(table.Config{}) }},
		{"tracked", func() limit.Limiter { return NewLeakyBucket(table.Config{TrackChanges: true}) }},
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
