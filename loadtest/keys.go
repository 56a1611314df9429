package main

import (
	"fmt"
	"math/rand/v2"
	"strconv"
)

// Key distributions (--dist).
const (
	distUniform = "uniform" // every key equally likely
	distZipf    = "zipf"    // P(k) ∝ (1 + k)^−s over keys 0..N−1, s = --zipf-s
	distHot     = "hot"     // one key takes every hit: the worst case for an owner
)

// defaultZipfS is the Zipf exponent when --zipf-s is not given. Over
// 100,000 keys, s = 1.1 gives the head key 13.5% of the traffic, the top
// 100 keys 58% and the top 1% of keys 75%: a common model of skewed API
// keys, hot enough to load one owner more than the others.
const defaultZipfS = 1.1

// keyGen yields key indices in [0, N). Not safe for concurrent use: each
// worker owns one.
type keyGen func() int

// newKeyGen returns a generator for dist over n keys, seeded so that a run
// is reproducible with --seed. s is the Zipf exponent (> 1).
func newKeyGen(dist string, n int, s float64, seed, stream uint64) (keyGen, error) {
	if n < 1 {
		return nil, fmt.Errorf("need at least one key, got %d", n)
	}
	r := rand.New(rand.NewPCG(seed, stream))
	switch dist {
	case distUniform:
		return func() int { return r.IntN(n) }, nil
	case distZipf:
		if !(s > 1) {
			return nil, fmt.Errorf("zipf exponent must be > 1, got %v", s)
		}
		z := rand.NewZipf(r, s, 1, uint64(n-1))
		return func() int { return int(z.Uint64()) }, nil
	case distHot:
		return func() int { return 0 }, nil
	}
	return nil, fmt.Errorf("unknown distribution %q (want %s, %s or %s)", dist, distUniform, distZipf, distHot)
}

// keyNames returns the n key strings of a run, made once so that the hot
// loop does not format strings. The prefix carries the run id, so two runs
// never share limiter state.
func keyNames(prefix string, n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = prefix + strconv.Itoa(i)
	}
	return keys
}
