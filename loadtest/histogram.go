package main

import (
	"math"
	"math/bits"
	"time"
)

// Histogram layout: HDR-style log-linear buckets over non-negative int64
// values (nanoseconds here). Values below 2×subCount have a bucket each;
// above, every power-of-two range [2^e, 2^(e+1)) is cut into subCount
// equal buckets. A bucket is at most 1/subCount of its lower edge wide,
// and a quantile is reported as its bucket's midpoint, so a reported
// quantile is within 1/(2×subCount) = 1/256 ≈ 0.39% of the exact value
// (see Quantile). The whole int64 range fits in numBuckets counters
// (57 KiB), whatever the run length: memory does not grow with requests.
const (
	subBits    = 7
	subCount   = 1 << subBits
	numBuckets = (64 - subBits) * subCount

	// RelativeError bounds |reported − exact| / exact for every quantile.
	RelativeError = 1.0 / (2 * subCount)
)

// Histogram counts values in log-linear buckets. The zero value is not
// usable; call newHistogram. It is not safe for concurrent use: each
// worker records into its own, and they are merged.
type Histogram struct {
	counts   []uint64
	n        uint64
	min, max int64
	sum      float64
}

func newHistogram() *Histogram {
	return &Histogram{counts: make([]uint64, numBuckets), min: math.MaxInt64}
}

// bucketOf returns the index of v's bucket. With s = max(0, len(v) −
// subBits − 1), the index is s×subCount + v>>s: v>>s has subBits+1 bits
// (or fewer when s is 0), so the indices of consecutive ranges abut.
func bucketOf(v int64) int {
	u := uint64(max(v, 0))
	s := max(bits.Len64(u)-subBits-1, 0)
	return s*subCount + int(u>>s)
}

// bucketRange returns the lowest value of bucket i and its width.
func bucketRange(i int) (lo, width int64) {
	if i < 2*subCount {
		return int64(i), 1
	}
	s := i/subCount - 1
	sub := int64(i - s*subCount)
	return sub << s, 1 << s
}

// Record counts one value; negative values count as 0.
func (h *Histogram) Record(v int64) {
	v = max(v, 0)
	h.counts[bucketOf(v)]++
	h.n++
	h.min = min(h.min, v)
	h.max = max(h.max, v)
	h.sum += float64(v)
}

// RecordDuration counts d in nanoseconds.
func (h *Histogram) RecordDuration(d time.Duration) { h.Record(int64(d)) }

// Count returns how many values were recorded.
func (h *Histogram) Count() uint64 { return h.n }

// Max returns the largest value recorded, exactly (0 when empty).
func (h *Histogram) Max() int64 {
	if h.n == 0 {
		return 0
	}
	return h.max
}

// Mean returns the exact mean of the recorded values (0 when empty).
func (h *Histogram) Mean() float64 {
	if h.n == 0 {
		return 0
	}
	return h.sum / float64(h.n)
}

// Quantile returns the nearest-rank q-quantile (q in [0, 1]): the value
// of rank ⌈q×n⌉ in sorted order, within RelativeError. The exact value x
// lies in the bucket found; the midpoint is at most width/2 from it, and
// width ≤ lo/subCount ≤ x/subCount. One-wide buckets are exact. The
// result is clamped to the exact minimum and maximum, and the top rank
// is the exact maximum. 0 when empty.
func (h *Histogram) Quantile(q float64) int64 {
	if h.n == 0 {
		return 0
	}
	rank := uint64(math.Ceil(min(max(q, 0), 1) * float64(h.n)))
	rank = max(rank, 1)
	if rank == h.n {
		return h.max
	}
	var seen uint64
	for i, c := range h.counts {
		if seen += c; seen >= rank {
			lo, w := bucketRange(i)
			return min(max(lo+w/2, h.min), h.max)
		}
	}
	return h.max
}

// Merge adds every value recorded in o to h.
func (h *Histogram) Merge(o *Histogram) {
	if o.n == 0 {
		return
	}
	for i, c := range o.counts {
		h.counts[i] += c
	}
	h.n += o.n
	h.min = min(h.min, o.min)
	h.max = max(h.max, o.max)
	h.sum += o.sum
}

// Reset forgets every value.
func (h *Histogram) Reset() {
	clear(h.counts)
	h.n, h.min, h.max, h.sum = 0, math.MaxInt64, 0, 0
}
