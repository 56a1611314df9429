package main

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// exactQuantile is the nearest-rank quantile of sorted values.
func exactQuantile(sorted []int64, q float64) int64 {
	rank := max(int(math.Ceil(q*float64(len(sorted)))), 1)
	return sorted[rank-1]
}

func TestHistogramQuantilesWithinRelativeError(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(1, 2))
	sources := map[string]func() int64{
		"lognormal latency": func() int64 { return int64(math.Exp(r.NormFloat64()*1.5 + 13)) }, // ~0.4 ms median
		"uniform wide":      func() int64 { return r.Int64N(1 << 40) },
		"small integers":    func() int64 { return r.Int64N(300) },
		"heavy tail":        func() int64 { return int64(1e5 / math.Pow(r.Float64()+1e-9, 1.2)) },
	}
	qs := []float64{0, 0.001, 0.1, 0.5, 0.9, 0.99, 0.999, 0.9999, 1}
	for name, next := range sources {
		h := newHistogram()
		vals := make([]int64, 200_000)
		for i := range vals {
			vals[i] = next()
			h.Record(vals[i])
		}
		slices.Sort(vals)
		for _, q := range qs {
			got, want := h.Quantile(q), exactQuantile(vals, q)
			if rel := math.Abs(float64(got-want)) / math.Max(float64(want), 1); rel > RelativeError {
				t.Errorf("%s: Quantile(%v) = %d, exact %d: relative error %.5f > %.5f", name, q, got, want, rel, RelativeError)
			}
		}
		if h.Max() != vals[len(vals)-1] || h.Count() != uint64(len(vals)) {
			t.Errorf("%s: Max, Count = %d, %d; want %d, %d", name, h.Max(), h.Count(), vals[len(vals)-1], len(vals))
		}
	}
}

func TestHistogramBucketsTileTheRange(t *testing.T) {
	t.Parallel()
	next := int64(0)
	for i := range numBuckets {
		lo, w := bucketRange(i)
		if lo != next {
			t.Fatalf("bucket %d starts at %d, want %d (the end of bucket %d)", i, lo, next, i-1)
		}
		if bucketOf(lo) != i || bucketOf(lo+w-1) != i {
			t.Fatalf("bucketOf(%d), bucketOf(%d) = %d, %d; want %d", lo, lo+w-1, bucketOf(lo), bucketOf(lo+w-1), i)
		}
		if lo >= 2*subCount && float64(w) > float64(lo)/subCount {
			t.Fatalf("bucket %d [%d, +%d) is wider than 1/%d of its start", i, lo, w, subCount)
		}
		next = lo + w
		if next < 0 { // the last bucket ends at 2^63
			if i != numBuckets-1 {
				t.Fatalf("bucket %d reaches 2^63 before the last bucket %d", i, numBuckets-1)
			}
			return
		}
	}
	t.Fatalf("buckets end at %d, short of MaxInt64", next)
}

func TestHistogramMerge(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(3, 4))
	a, b, all := newHistogram(), newHistogram(), newHistogram()
	for i := range 50_000 {
		v := r.Int64N(1e9)
		all.Record(v)
		if i%3 == 0 {
			a.Record(v)
		} else {
			b.Record(v)
		}
	}
	a.Merge(b)
	a.Merge(newHistogram()) // an empty one changes nothing
	if !slices.Equal(a.counts, all.counts) || a.Count() != all.Count() || a.Max() != all.Max() || a.min != all.min {
		t.Fatalf("merged halves differ from one histogram of everything: n %d vs %d, max %d vs %d", a.Count(), all.Count(), a.Max(), all.Max())
	}
	if math.Abs(a.Mean()-all.Mean()) > 1e-6*all.Mean() {
		t.Errorf("merged Mean = %v, want %v", a.Mean(), all.Mean())
	}
	a.Reset()
	if a.Count() != 0 || a.Quantile(0.5) != 0 || a.Max() != 0 {
		t.Errorf("after Reset: Count, p50, Max = %d, %d, %d; want zeros", a.Count(), a.Quantile(0.5), a.Max())
	}
}

func TestHistogramEdges(t *testing.T) {
	t.Parallel()
	h := newHistogram()
	if got := h.Quantile(0.99); got != 0 {
		t.Errorf("empty Quantile(0.99) = %d, want 0", got)
	}
	h.Record(-5) // counts as 0
	h.Record(math.MaxInt64)
	if got := h.Quantile(0); got != 0 {
		t.Errorf("Quantile(0) = %d, want 0", got)
	}
	if got := h.Quantile(1); got != math.MaxInt64 {
		t.Errorf("Quantile(1) = %d, want MaxInt64", got)
	}
	one := newHistogram()
	one.Record(123_456_789)
	for _, q := range []float64{0, 0.5, 1} {
		if got := one.Quantile(q); got != 123_456_789 {
			t.Errorf("single value: Quantile(%v) = %d, want it exactly (clamped to min/max)", q, got)
		}
	}
}
