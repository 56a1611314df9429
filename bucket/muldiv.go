package bucket

import (
	"math"
	"math/bits"
)

// The bucket arithmetic multiplies hit counts by periods and nanoseconds by
// limits. With Limit up to 1e9 and spans up to years those products need up
// to ~90 bits, so they are formed in 128 bits and divided once, rounded in
// the direction the caller names. Inputs are never negative.

// mulDivFloor returns ⌊a×b/c⌋, saturated at math.MaxInt64.
func mulDivFloor(a, b, c int64) int64 {
	q, _, ok := mulDiv(a, b, c)
	if !ok {
		return math.MaxInt64
	}
	return q
}

// mulDivCeil returns ⌈a×b/c⌉, saturated at math.MaxInt64.
func mulDivCeil(a, b, c int64) int64 {
	q, r, ok := mulDiv(a, b, c)
	if !ok {
		return math.MaxInt64
	}
	if r != 0 && q < math.MaxInt64 {
		q++
	}
	return q
}

// mulDiv returns the quotient and remainder of a×b/c, and false when the
// quotient does not fit in an int64.
func mulDiv(a, b, c int64) (q int64, r uint64, ok bool) {
	hi, lo := bits.Mul64(uint64(a), uint64(b))
	if hi >= uint64(c) {
		return 0, 0, false
	}
	uq, ur := bits.Div64(hi, lo, uint64(c))
	if uq > math.MaxInt64 {
		return 0, 0, false
	}
	return int64(uq), ur, true
}

// mulLE reports whether a×b ≤ c×d, exactly.
func mulLE(a, b, c, d int64) bool {
	h1, l1 := bits.Mul64(uint64(a), uint64(b))
	h2, l2 := bits.Mul64(uint64(c), uint64(d))
	return h1 < h2 || h1 == h2 && l1 <= l2
}

// satMul returns a×b, saturated at math.MaxInt64.
func satMul(a, b int64) int64 {
	hi, lo := bits.Mul64(uint64(a), uint64(b))
	if hi != 0 || lo > math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(lo)
}
