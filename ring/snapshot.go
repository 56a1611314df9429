package ring

import (
	"cmp"
	"errors"
	"fmt"
	"slices"

	"github.com/cespare/xxhash/v2"
)

// ErrNoMembers is returned by New for an empty member list.
var ErrNoMembers = errors.New("ring: no members")

// errNoRoom is returned by place when no member has room for a partition;
// Config.resolve rules that out.
var errNoRoom = errors.New("ring: no member has room for a partition")

// Member is one node as the ring sees it. Name must be non-empty and unique
// within a member list.
type Member struct {
	Name     string // unique node name; the identity on the ring (several nodes may share an IP)
	Addr     string // client gRPC address; opaque to the ring
	PeerAddr string // gRPC address other nodes forward and move state to; opaque to the ring
}

// Snapshot is an immutable assignment of keys to members. It is safe for
// concurrent use by any number of goroutines without locks; nothing in it
// changes after New returns. Build a new Snapshot when membership changes.
type Snapshot struct {
	version uint64
	cfg     Config   // with defaults filled in
	members []Member // sorted by Name; an owner index points in here
	owners  []uint16 // partition → index into members
	modulus uint64   // len(owners)
	owned   []int    // member index → number of partitions it owns
}

// New builds the Snapshot for members. version is opaque to the ring and
// returned by Version; callers use it to tell snapshots apart (for example a
// membership generation counter).
//
// The owners depend only on the set of member names and cfg, never on the
// order of members or on Addr. New returns an error, and never panics, when
// members is empty, a name is empty or repeated, or cfg is out of range. It
// does not keep members; the caller may reuse the slice.
func New(members []Member, version uint64, cfg Config) (*Snapshot, error) {
	sorted, err := sortedMembers(members)
	if err != nil {
		return nil, err
	}
	cfg, err = cfg.resolve(len(sorted))
	if err != nil {
		return nil, err
	}
	owners, owned, err := place(sorted, cfg)
	if err != nil {
		return nil, err
	}
	return &Snapshot{
		version: version,
		cfg:     cfg,
		members: sorted,
		owners:  owners,
		modulus: uint64(len(owners)),
		owned:   owned,
	}, nil
}

// sortedMembers returns a copy of members sorted by Name, or an error for an
// empty list, an empty name or a repeated name.
func sortedMembers(members []Member) ([]Member, error) {
	switch {
	case len(members) == 0:
		return nil, ErrNoMembers
	case len(members) > maxMembers:
		return nil, fmt.Errorf("ring: %d members, max %d", len(members), maxMembers)
	}
	sorted := slices.Clone(members)
	slices.SortFunc(sorted, func(a, b Member) int { return cmp.Compare(a.Name, b.Name) })
	if sorted[0].Name == "" {
		return nil, fmt.Errorf("ring: member with address %q has an empty name", sorted[0].Addr)
	}
	for i := 1; i < len(sorted); i++ {
		if sorted[i].Name == sorted[i-1].Name {
			return nil, fmt.Errorf("ring: duplicate member name %q", sorted[i].Name)
		}
	}
	return sorted, nil
}

// OwnerIndex returns the index in Members of the member that owns key. It
// takes no lock and allocates nothing.
func (s *Snapshot) OwnerIndex(key string) int {
	return int(s.owners[xxhash.Sum64String(key)%s.modulus])
}

// Owner returns the member that owns key. It takes no lock and allocates
// nothing.
func (s *Snapshot) Owner(key string) Member {
	return s.members[s.OwnerIndex(key)]
}

// Version returns the version passed to New.
func (s *Snapshot) Version() uint64 { return s.version }

// Config returns the Config the Snapshot was built with, defaults filled in.
func (s *Snapshot) Config() Config { return s.cfg }

// Len returns the number of members.
func (s *Snapshot) Len() int { return len(s.members) }

// Member returns the member at index i (0 <= i < Len), in Name order. Unlike
// Members it does not copy.
func (s *Snapshot) Member(i int) Member { return s.members[i] }

// Members returns a copy of the members, sorted by Name. The index of a
// member in it is what OwnerIndex returns.
func (s *Snapshot) Members() []Member { return slices.Clone(s.members) }

// IndexOf returns the index of the member called name, or -1 if there is
// none. A node uses it to find itself: a key is local when
// OwnerIndex(key) == IndexOf(self).
func (s *Snapshot) IndexOf(name string) int {
	if i, ok := indexOf(s.members, name); ok {
		return i
	}
	return -1
}

// indexOf finds name in members sorted by Name.
func indexOf(members []Member, name string) (int, bool) {
	return slices.BinarySearchFunc(members, name, func(m Member, name string) int {
		return cmp.Compare(m.Name, name)
	})
}

// Shares returns, for each member name, the fraction of partitions it owns
// (and so, for a spread of keys, roughly the fraction of keys). The fractions
// sum to 1. The map is new on each call.
func (s *Snapshot) Shares() map[string]float64 {
	shares := make(map[string]float64, len(s.members))
	for i, m := range s.members {
		shares[m.Name] = float64(s.owned[i]) / float64(len(s.owners))
	}
	return shares
}

// Partitions returns the number of partitions (Config.PartitionCount).
func (s *Snapshot) Partitions() int { return len(s.owners) }

// PartitionOf returns the partition of key. Keys change owner in whole
// partitions, so state can be moved partition by partition.
func (s *Snapshot) PartitionOf(key string) int {
	return int(xxhash.Sum64String(key) % s.modulus)
}

// PartitionOwner returns the index in Members of the member that owns
// partition p (0 <= p < Partitions).
func (s *Snapshot) PartitionOwner(p int) int { return int(s.owners[p]) }

// Without returns the snapshot of the same members less the one called
// name, with the same version and Config: the owners the cluster will have
// once that member is gone. A node replicates the keys it owns to their
// owner in Without(itself), so that when it dies its keys move to exactly
// the node that holds their replica. It returns an error when name is not a
// member or is the only one. It costs as much as New.
func (s *Snapshot) Without(name string) (*Snapshot, error) {
	i := s.IndexOf(name)
	if i < 0 {
		return nil, fmt.Errorf("ring: %q is not a member", name)
	}
	rest := make([]Member, 0, len(s.members)-1)
	rest = append(rest, s.members[:i]...)
	rest = append(rest, s.members[i+1:]...)
	return New(rest, s.version, s.cfg)
}
