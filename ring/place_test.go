package ring

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/buraksezer/consistent"
	"github.com/cespare/xxhash/v2"
)

// The reference placement: buraksezer/consistent v1.0.0 itself, which
// place reimplements without its N sorts.

// node is a member's identity on the consistent-hash ring: its name only.
type node string

func (n node) String() string { return string(n) }

// hasher adapts xxhash to consistent.Hasher.
type hasher struct{}

func (hasher) Sum64(b []byte) uint64 { return xxhash.Sum64(b) }

// placeConsistent runs the bounded-load placement over sorted (already validated, and
// sorted so that even a hash collision between two members' ring points is
// resolved the same way on every node) and flattens the result into a
// partition → member index table.
func placeConsistent(sorted []Member, cfg Config) (owners []uint16, owned []int, err error) {
	nodes := make([]consistent.Member, len(sorted))
	for i, m := range sorted {
		nodes[i] = node(m.Name)
	}
	c := consistent.New(nodes, consistent.Config{
		Hasher:            hasher{},
		PartitionCount:    cfg.PartitionCount,
		ReplicationFactor: cfg.ReplicationFactor,
		Load:              cfg.Load,
	})
	owners = make([]uint16, cfg.PartitionCount)
	owned = make([]int, len(sorted))
	for p := range owners {
		m := c.GetPartitionOwner(p)
		if m == nil { // consistent assigns every partition; guard against a change
			return nil, nil, fmt.Errorf("ring: partition %d has no owner", p)
		}
		i, ok := indexOf(sorted, m.String())
		if !ok {
			return nil, nil, fmt.Errorf("ring: partition %d owned by unknown member %q", p, m.String())
		}
		owners[p] = uint16(i)
		owned[i]++
	}
	return owners, owned, nil
}

// place gives every partition the owner consistent gives it: member sets
// of 1 to 300 random names, and names that differ in one character, under
// the default Config and others.
func TestPlaceMatchesConsistent(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(1, 2))
	configs := []Config{{}, {PartitionCount: 271, ReplicationFactor: 3, Load: 1.0}, {PartitionCount: 16381, ReplicationFactor: 20, Load: 1.25}}
	sizes := []int{1, 2, 3, 5, 10, 33, 100, 300}
	for _, n := range sizes {
		for ci, c := range configs {
			members := make([]Member, n)
			for i := range members {
				members[i] = Member{Name: fmt.Sprintf("node-%d-%x", i, r.Uint32()%64)}
			}
			sorted, err := sortedMembers(members)
			if err != nil {
				t.Fatal(err)
			}
			cfg, err := c.resolve(n)
			if err != nil {
				t.Fatal(err)
			}
			got, gotOwned, err := place(sorted, cfg)
			if err != nil {
				t.Fatal(err)
			}
			want, wantOwned, err := placeConsistent(sorted, cfg)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, want) || !slices.Equal(gotOwned, wantOwned) {
				t.Fatalf("%d members, config %d: place and consistent disagree", n, ci)
			}
		}
	}
}

// BenchmarkPlace compares place with the library it reimplements: the
// cost of a rebuild as the cluster grows.
func BenchmarkPlace(b *testing.B) {
	for _, n := range []int{3, 30, 300, 1000} {
		sorted, _ := sortedMembers(namedMembers(n))
		cfg, _ := Config{}.resolve(n)
		for _, impl := range []struct {
			name string
			fn   func([]Member, Config) ([]uint16, []int, error)
		}{{"direct", place}, {"consistent", placeConsistent}} {
			b.Run(fmt.Sprintf("%s/members=%d", impl.name, n), func(b *testing.B) {
				for b.Loop() {
					if _, _, err := impl.fn(sorted, cfg); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
