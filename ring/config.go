package ring

import (
	"fmt"
	"math"
)

// Defaults chosen by the zero Config. With them the busiest of 3–10 members
// owns at most about 1.07× the average number of keys, and a join moves at
// most about 1.15× the ideal 1/(N+1) of the keys (see balance_test.go).
const (
	DefaultPartitionCount    = 4093 // a prime: ~400 partitions per member at 10 members
	DefaultReplicationFactor = 100
	DefaultLoad              = 1.05
)

// Limits that keep New's time and memory bounded whatever the input.
const (
	maxPartitionCount    = 1 << 20
	maxReplicationFactor = 1 << 10
	maxMembers           = 1<<16 - 1 // owner indexes are stored as uint16
)

// Config tunes how New places partitions on members. The zero value selects
// the defaults above, which suit clusters of 1 to a few hundred members.
//
// Every node of a cluster must use the same Config: two nodes with different
// Configs disagree on owners even when they agree on members.
type Config struct {
	// PartitionCount is the number of partitions the key space is cut into;
	// keys change owner in whole partitions. Zero means
	// DefaultPartitionCount (4093); otherwise it must be 1 to 1<<20.
	//
	// More partitions spread load more finely: the busiest member holds up
	// to ⌈Load·P/N⌉ partitions, so rounding adds up to N/P to its share. The
	// price is a bigger lookup table (2 bytes per partition) and a slower
	// New (linear in PartitionCount). With more members than partitions,
	// some members own nothing. A prime count keeps the modulo from echoing
	// patterns in the hash.
	PartitionCount int

	// ReplicationFactor is the number of points (virtual nodes) each member
	// has on the hash ring. Zero means DefaultReplicationFactor (100);
	// otherwise it must be 1 to 1024.
	//
	// More points make the raw consistent-hash spread smoother, so fewer
	// partitions overflow their first choice and fewer move when a member
	// joins or leaves. The price is New time and memory: New sorts and
	// walks N·ReplicationFactor points. The finished Snapshot does not keep
	// them.
	ReplicationFactor int

	// Load bounds how many partitions one member may hold: at most
	// ⌈Load·PartitionCount/N⌉ for N members (consistent hashing with
	// bounded loads). Zero means DefaultLoad (1.05); otherwise it must be a
	// finite number ≥ 1, since below 1 the partitions would not fit on the
	// members.
	//
	// Lower values balance more tightly (the busiest member holds about
	// Load times the average) but push more partitions past their
	// consistent-hash choice, so a membership change moves a few more keys
	// than the ideal 1/N. Measured with the default partitions and points:
	// Load 1.0 gives max/avg ≈ 1.02 and moves up to ~1.25× the ideal;
	// Load 1.25 gives max/avg ≈ 1.2 and moves ~1.1× the ideal.
	Load float64
}

// resolve returns c with defaults filled in, or an error saying which field
// is out of range for n members.
func (c Config) resolve(n int) (Config, error) {
	if c.PartitionCount == 0 {
		c.PartitionCount = DefaultPartitionCount
	}
	if c.ReplicationFactor == 0 {
		c.ReplicationFactor = DefaultReplicationFactor
	}
	if c.Load == 0 {
		c.Load = DefaultLoad
	}
	switch {
	case c.PartitionCount < 1 || c.PartitionCount > maxPartitionCount:
		return c, fmt.Errorf("ring: partition count %d out of range [1, %d]", c.PartitionCount, maxPartitionCount)
	case c.ReplicationFactor < 1 || c.ReplicationFactor > maxReplicationFactor:
		return c, fmt.Errorf("ring: replication factor %d out of range [1, %d]", c.ReplicationFactor, maxReplicationFactor)
	case !(c.Load >= 1) || math.IsInf(c.Load, 1): // !(>=) also rejects NaN
		return c, fmt.Errorf("ring: load %v must be a finite number >= 1", c.Load)
	}
	// consistent panics ("not enough room to distribute partitions") when the
	// per-member cap times the member count is below the partition count.
	// Load >= 1 rules that out; check the library's own arithmetic anyway so
	// that a change there turns into an error here rather than a panic.
	if n > 0 {
		capacity := math.Ceil(float64(c.PartitionCount) / float64(n) * c.Load)
		if capacity*float64(n) < float64(c.PartitionCount) {
			return c, fmt.Errorf("ring: load %v leaves no room for %d partitions on %d members", c.Load, c.PartitionCount, n)
		}
	}
	return c, nil
}
