package main

import (
	"math"
	"testing"
)

func counts(t *testing.T, dist string, n, draws int, s float64) []int {
	t.Helper()
	gen, err := newKeyGen(dist, n, s, 42, 7)
	if err != nil {
		t.Fatal(err)
	}
	c := make([]int, n)
	for range draws {
		k := gen()
		if k < 0 || k >= n {
			t.Fatalf("%s: key %d outside [0, %d)", dist, k, n)
		}
		c[k]++
	}
	return c
}

func TestUniformKeysSpreadEvenly(t *testing.T) {
	t.Parallel()
	const n, draws = 20, 200_000
	for k, c := range counts(t, distUniform, n, draws, 0) {
		if share := float64(c) / draws; math.Abs(share-1.0/n) > 0.1/n {
			t.Errorf("key %d drew %.4f of the hits, want %.4f ± 10%%", k, share, 1.0/n)
		}
	}
}

func TestZipfKeysFollowTheExponent(t *testing.T) {
	t.Parallel()
	const n, draws, s = 1000, 400_000, 1.1
	c := counts(t, distZipf, n, draws, s)
	// P(k) ∝ (1+k)^−s: key 0 over key k is (1+k)^s.
	for _, k := range []int{1, 3, 9} {
		want := math.Pow(float64(1+k), s)
		if got := float64(c[0]) / float64(c[k]); math.Abs(got-want) > 0.1*want {
			t.Errorf("count(0)/count(%d) = %.2f, want (1+%d)^%v = %.2f ± 10%%", k, got, k, s, want)
		}
	}
	var h float64
	for k := range n {
		h += math.Pow(float64(1+k), -s)
	}
	if got, want := float64(c[0])/draws, 1/h; math.Abs(got-want) > 0.05*want {
		t.Errorf("key 0 drew %.4f of the hits, want %.4f", got, want)
	}
}

func TestHotKeyIsOneKey(t *testing.T) {
	t.Parallel()
	if c := counts(t, distHot, 100, 1000, 0); c[0] != 1000 {
		t.Errorf("hot: key 0 drew %d of 1000", c[0])
	}
}

func TestKeyGenRejects(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		dist string
		n    int
		s    float64
	}{{distUniform, 0, 0}, {distZipf, 10, 1}, {"pareto", 10, 0}} {
		if _, err := newKeyGen(tc.dist, tc.n, tc.s, 1, 1); err == nil {
			t.Errorf("newKeyGen(%q, %d, %v) succeeded, want an error", tc.dist, tc.n, tc.s)
		}
	}
}

func TestKeyNamesAreDistinct(t *testing.T) {
	t.Parallel()
	seen := map[string]bool{}
	for _, k := range keyNames("lt-x-", 1000) {
		if seen[k] {
			t.Fatalf("key %q twice", k)
		}
		seen[k] = true
	}
}
