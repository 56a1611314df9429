// Package wide implements saturating int64 arithmetic with 128-bit
// intermediates: products of hit counts, periods and limits need up to ~90
// bits before they are divided back into range.
//
// Every function takes non-negative operands (and a positive divisor) and
// saturates at math.MaxInt64 instead of overflowing. It is a leaf package.
package wide

import (
	"math"
	"math/bits"
)

// MulDivFloor returns ⌊a×b/c⌋, saturated at math.MaxInt64.
func MulDivFloor(a, b, c int64) int64 {
	q, _, ok := mulDiv(a, b, c)
	if !ok {
		return math.MaxInt64
	}
	return q
}

// MulDivCeil returns ⌈a×b/c⌉, saturated at math.MaxInt64.
func MulDivCeil(a, b, c int64) int64 {
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

// MulLE reports whether a×b ≤ c×d, exactly.
func MulLE(a, b, c, d int64) bool {
	h1, l1 := bits.Mul64(uint64(a), uint64(b))
	h2, l2 := bits.Mul64(uint64(c), uint64(d))
	return h1 < h2 || h1 == h2 && l1 <= l2
}

// Mul returns a×b, saturated at math.MaxInt64.
func Mul(a, b int64) int64 {
	hi, lo := bits.Mul64(uint64(a), uint64(b))
	if hi != 0 || lo > math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(lo)
}

// Add returns a+b, saturated at math.MaxInt64.
func Add(a, b int64) int64 {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}
