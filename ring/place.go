package ring

import (
	"encoding/binary"
	"math"
	"slices"
	"strconv"

	"github.com/cespare/xxhash/v2"
)

// place assigns every partition to a member of sorted (validated, sorted by
// name) by consistent hashing with bounded loads, exactly as
// buraksezer/consistent v1.0.0 does with this package's hasher (xxhash):
// the same owners, partition for partition (TestPlaceMatchesConsistent
// compares the two over many member sets and Configs).
//
// The algorithm: each member has ReplicationFactor points on a ring of
// uint64, the xxhash of "i:name"; two points that collide belong to the
// member later in name order. Partition p hashes its index (8 bytes, little
// endian) and goes to the first point at or after that hash, walking on
// past members that already hold the cap ⌈PartitionCount/N × Load⌉.
//
// It does not call consistent.New: that adds the members one at a time and
// sorts every point after each one, N sorts of up to N·ReplicationFactor
// points, which at 1,000 members took seconds per rebuild on every node.
// Here the points are sorted once: O(N·R·log(N·R) + P·log(N·R)) plus the
// walks past full members.
func place(sorted []Member, cfg Config) (owners []uint16, owned []int, err error) {
	n, r := len(sorted), cfg.ReplicationFactor
	type point struct {
		hash   uint64
		member uint16
	}
	points := make([]point, 0, n*r)
	var buf []byte
	for i, m := range sorted {
		for v := range r {
			buf = strconv.AppendInt(buf[:0], int64(v), 10)
			buf = append(buf, ':')
			buf = append(buf, m.Name...)
			points = append(points, point{xxhash.Sum64(buf), uint16(i)})
		}
	}
	// By hash; equal hashes by member, so that a collision is resolved
	// below to the member later in name order, as the library's map of
	// points keeps the one added last.
	slices.SortFunc(points, func(a, b point) int {
		if a.hash != b.hash {
			if a.hash < b.hash {
				return -1
			}
			return 1
		}
		return int(a.member) - int(b.member)
	})
	for i := len(points) - 2; i >= 0; i-- {
		if points[i].hash == points[i+1].hash {
			points[i].member = points[i+1].member
		}
	}
	capacity := int(math.Ceil(float64(cfg.PartitionCount) / float64(n) * cfg.Load))
	owners = make([]uint16, cfg.PartitionCount)
	owned = make([]int, n)
	var pb [8]byte
	for p := range owners {
		binary.LittleEndian.PutUint64(pb[:], uint64(p))
		h := xxhash.Sum64(pb[:])
		idx, _ := slices.BinarySearchFunc(points, h, func(pt point, h uint64) int {
			if pt.hash < h {
				return -1
			}
			if pt.hash > h {
				return 1
			}
			return 0
		})
		for tries := 0; ; tries++ {
			if tries == len(points) {
				return nil, nil, errNoRoom
			}
			if idx >= len(points) {
				idx = 0
			}
			if m := points[idx].member; owned[m] < capacity {
				owners[p] = m
				owned[m]++
				break
			}
			idx++
		}
	}
	return owners, owned, nil
}
