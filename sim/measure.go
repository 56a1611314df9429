package sim

import (
	"slices"
	"time"

	"github.com/shardlimiter/shardlimiter/ring"
)

// Measurements that need no running cluster: the ring alone.

// RingBuild returns the mean time of what a member's rebuild computes for
// a ring of n members: the snapshot and the snapshot without the member
// itself (where its keys are replicated), over reps builds. It reads the
// machine's clock, not the time package's, so that it measures inside a
// synctest bubble too.
func RingBuild(n, reps int, cfg ring.Config) (time.Duration, error) {
	ms := ringMembers(n)
	start := wallNow()
	for range reps {
		snap, err := ring.New(ms, 1, cfg)
		if err != nil {
			return 0, err
		}
		if n > 1 {
			if _, err := snap.Without(ms[0].Name); err != nil {
				return 0, err
			}
		}
	}
	return wallNow().Sub(start) / time.Duration(reps), nil
}

// ringMembers names n members as Cluster does.
func ringMembers(n int) []ring.Member {
	ms := make([]ring.Member, n)
	for i := range ms {
		ms[i] = ring.Member{Name: memberName(i), Addr: addr(i+1) + ":8081"}
	}
	return ms
}

// Spread is how evenly a ring spreads ownership: the busiest member's
// share over the mean, of partitions and of sample keys.
type Spread struct {
	Partitions, Keys float64
}

// SpreadOf measures snap's spread over keys.
func SpreadOf(snap *ring.Snapshot, keys []string) Spread {
	n := snap.Len()
	parts := make([]int, n)
	for p := range snap.Partitions() {
		parts[snap.PartitionOwner(p)]++
	}
	owned := make([]int, n)
	for _, k := range keys {
		owned[snap.OwnerIndex(k)]++
	}
	return Spread{
		Partitions: float64(slices.Max(parts)) * float64(n) / float64(snap.Partitions()),
		Keys:       float64(slices.Max(owned)) * float64(n) / float64(max(1, len(keys))),
	}
}

// MovedFraction returns the fraction of keys whose owner differs between two
// rings.
func MovedFraction(before, after *ring.Snapshot, keys []string) float64 {
	k := 0
	for _, key := range keys {
		if before.Owner(key).Name != after.Owner(key).Name {
			k++
		}
	}
	return float64(k) / float64(max(1, len(keys)))
}

// RingOnly measures, without running members, what the ring alone
// decides at n members under cfg: the rebuild time, the spread over
// keys, and the keys one more member moves over the ideal 1/(n+1), the
// mean over ringJoins joins (each of another member, alone: one join's
// figure depends on the name that joins).
func RingOnly(n int, keys []string, cfg ring.Config) (build time.Duration, spread Spread, movedIdeal float64, err error) {
	if build, err = RingBuild(n, max(3, 3000/n), cfg); err != nil {
		return 0, Spread{}, 0, err
	}
	before, err := ring.New(ringMembers(n), 1, cfg)
	if err != nil {
		return 0, Spread{}, 0, err
	}
	var sum float64
	for j := range ringJoins {
		ms := append(ringMembers(n), ring.Member{Name: memberName(n + j)})
		after, err := ring.New(ms, 2, cfg)
		if err != nil {
			return 0, Spread{}, 0, err
		}
		sum += MovedFraction(before, after, keys)
	}
	return build, SpreadOf(before, keys), sum / ringJoins * float64(n+1), nil
}

// ringJoins is how many joins RingOnly averages.
const ringJoins = 10
