package peer

import (
	"slices"
	"testing"

	"github.com/shardlimiter/shardlimiter/ring"
)

// A client that builds ring.New from Membership must get the node's owners.
func TestMembershipRebuildsTheNodesRing(t *testing.T) {
	t.Parallel()
	c := newTestCluster(t, 3, Config{Ring: ring.Config{PartitionCount: 101}})
	tn := c.running()[1]
	m := tn.node.Membership()
	if m.Node != tn.name || m.Version != tn.node.RingVersion() || len(m.Members) != 3 {
		t.Fatalf("Membership() = %+v, want node %s, version %d, 3 members", m, tn.name, tn.node.RingVersion())
	}
	var members []ring.Member
	for _, mb := range m.Members {
		members = append(members, ring.Member{Name: mb.Name, Addr: mb.Addr})
	}
	snap, err := ring.New(members, m.Version, m.Config)
	if err != nil {
		t.Fatal(err)
	}
	own := tn.node.view.Load().snap
	if !slices.Equal(snap.Members(), own.Members()) {
		t.Errorf("members %v, node's %v", snap.Members(), own.Members())
	}
	for p := range own.Partitions() {
		if snap.PartitionOwner(p) != own.PartitionOwner(p) {
			t.Fatalf("partition %d: owner %d, node's %d", p, snap.PartitionOwner(p), own.PartitionOwner(p))
		}
	}
}
