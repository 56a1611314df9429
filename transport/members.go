package transport

import (
	"github.com/shardlimiter/shardlimiter/ring"
	"github.com/shardlimiter/shardlimiter/transport/pb"
)

// MembershipToPB converts a ring for the Cluster service.
func MembershipToPB(m ring.Membership) *pb.MembersUpdate {
	u := &pb.MembersUpdate{
		RingVersion: m.Version,
		Node:        m.Node,
		Ring: &pb.RingConfig{
			PartitionCount:    uint32(m.Config.PartitionCount),
			ReplicationFactor: uint32(m.Config.ReplicationFactor),
			Load:              m.Config.Load,
		},
	}
	for _, mb := range m.Members {
		u.Members = append(u.Members, &pb.Member{Name: mb.Name, GrpcAddr: mb.Addr})
	}
	return u
}

// MembershipFromPB converts a ring from the Cluster service.
func MembershipFromPB(u *pb.MembersUpdate) ring.Membership {
	m := ring.Membership{
		Node:    u.GetNode(),
		Version: u.GetRingVersion(),
		Config: ring.Config{
			PartitionCount:    int(u.GetRing().GetPartitionCount()),
			ReplicationFactor: int(u.GetRing().GetReplicationFactor()),
			Load:              u.GetRing().GetLoad(),
		},
	}
	for _, mb := range u.GetMembers() {
		m.Members = append(m.Members, ring.Member{Name: mb.GetName(), Addr: mb.GetGrpcAddr()})
	}
	return m
}
