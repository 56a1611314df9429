// Package quota implements the owner's side of Envoy's Rate Limit Quota
// Service: for each quota bucket (a key on the ring), the demand of every
// instance that reports on it, and each instance's max-min fair share of
// the bucket's limit, handed out as a lease with a time to live.
//
// The model: an instance reports how many requests it allowed and denied
// over the seconds since its last report; that rate, smoothed, is its
// demand. The limit is divided max-min fairly (FairShares): an instance
// that wants less than an equal share gets what it wants, the others split
// the rest evenly. An assignment is a lease: once handed out, it may be
// spent until its TTL ends, whatever the owner decides later. So when an
// instance's share shrinks, its old assignment still counts until its TTL
// ends, and the others grow only into what is left: the sum of the
// assignments that may be in use never exceeds the limit.
//
// The package is a leaf: time is the caller's now, it starts no goroutine,
// reads no clock and logs nothing. A Table is safe for concurrent use.
package quota

import (
	"math"
	"slices"
)

// FairShares divides limit among demands max-min fairly: demands under an
// equal share are met in full, and the others split what is left evenly.
// The shares sum to at most limit (to min(limit, Σ demands)). Negative or
// NaN demands count as 0; an infinite demand wants all it can get.
func FairShares(limit float64, demands []float64) []float64 {
	shares := make([]float64, len(demands))
	if limit <= 0 || len(demands) == 0 {
		return shares
	}
	order := make([]int, len(demands))
	for i := range order {
		order[i] = i
	}
	want := func(i int) float64 {
		d := demands[i]
		if d < 0 || math.IsNaN(d) {
			return 0
		}
		return d
	}
	slices.SortFunc(order, func(a, b int) int {
		switch da, db := want(a), want(b); {
		case da < db:
			return -1
		case da > db:
			return 1
		}
		return a - b
	})
	left := limit
	for k, i := range order {
		equal := left / float64(len(order)-k)
		s := min(want(i), equal)
		shares[i] = s
		left -= s
	}
	return shares
}
