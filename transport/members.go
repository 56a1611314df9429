package transport

import (
	"context"
	"errors"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/shardlimiter/shardlimiter/transport/pb"
)

// The Cluster service (cluster.proto) tells clients the ring, so that they
// send each check to its owner. It is served on the client port when
// GRPCConfig.Members is set. Each WatchMembers stream polls the node's ring
// version every MembersPollInterval (an atomic load) and sends the ring
// when it changed: one ticker per watching client, no subscription list in
// the node, and a change reaches clients at most one interval after the
// node rebuilt its ring (gossip takes seconds to notice a failure; this
// adds little).

// ClusterServiceName is the Cluster service, as registered and as health
// reports it.
const ClusterServiceName = "shardlimiter.v1.Cluster"

// MembersPollInterval is how often a WatchMembers stream looks at the
// node's ring version.
const MembersPollInterval = 100 * time.Millisecond

// Membership is a node's ring as the Cluster service sends it: with the
// same Members and Ring, ring.New gives the node's owners.
type Membership struct {
	Node    string // the node that sent it
	Version uint64 // the node's ring version; versions of different nodes are unrelated
	Members []Member
	Ring    RingConfig
}

// Member is one node of a ring.
type Member struct {
	Name string // unique node name, the identity on the ring
	Addr string // client gRPC address
}

// RingConfig mirrors ring.Config (transport does not import ring).
type RingConfig struct {
	PartitionCount    int
	ReplicationFactor int
	Load              float64
}

// MembershipSource is what the Cluster service needs of a node. Its
// methods are called concurrently from the streams' goroutines and must
// not block; RingVersion is called every MembersPollInterval per stream
// and should be as cheap as an atomic load.
type MembershipSource interface {
	RingVersion() uint64
	Membership() Membership
}

// clusterServer serves WatchMembers; its streams end when stop is done
// (GracefulStop would otherwise wait for them).
type clusterServer struct {
	pb.UnimplementedClusterServer
	src  MembershipSource
	stop context.Context
}

func (s *clusterServer) WatchMembers(_ *pb.WatchMembersRequest, stream grpc.ServerStreamingServer[pb.MembersUpdate]) error {
	t := time.NewTicker(MembersPollInterval)
	defer t.Stop()
	sent, last := false, uint64(0)
	for {
		if v := s.src.RingVersion(); !sent || v != last {
			m := s.src.Membership()
			if err := stream.Send(membershipToPB(m)); err != nil {
				return err
			}
			sent, last = true, m.Version
		}
		select {
		case <-stream.Context().Done():
			return stream.Context().Err()
		case <-s.stop.Done():
			return status.Error(codes.Unavailable, "transport: server stopping")
		case <-t.C:
		}
	}
}

func membershipToPB(m Membership) *pb.MembersUpdate {
	u := &pb.MembersUpdate{
		RingVersion: m.Version,
		Node:        m.Node,
		Ring: &pb.RingConfig{
			PartitionCount:    uint32(m.Ring.PartitionCount),
			ReplicationFactor: uint32(m.Ring.ReplicationFactor),
			Load:              m.Ring.Load,
		},
	}
	for _, mb := range m.Members {
		u.Members = append(u.Members, &pb.Member{Name: mb.Name, GrpcAddr: mb.Addr})
	}
	return u
}

func membershipFromPB(u *pb.MembersUpdate) Membership {
	m := Membership{
		Node:    u.GetNode(),
		Version: u.GetRingVersion(),
		Ring: RingConfig{
			PartitionCount:    int(u.GetRing().GetPartitionCount()),
			ReplicationFactor: int(u.GetRing().GetReplicationFactor()),
			Load:              u.GetRing().GetLoad(),
		},
	}
	for _, mb := range u.GetMembers() {
		m.Members = append(m.Members, Member{Name: mb.GetName(), Addr: mb.GetGrpcAddr()})
	}
	return m
}

// ErrNoCluster: the node does not serve the Cluster service (an older
// version, or a listener without GRPCConfig.Members).
var ErrNoCluster = errors.New("transport: node does not serve " + ClusterServiceName)

// WatchMembers calls update with the node's ring at once and after each
// change, from the calling goroutine, until ctx ends or the stream fails.
// It always returns an error: one wrapping ctx.Err(), ErrNoCluster, or the
// stream's failure (errors.Is ErrUnavailable when the node went away or
// stopped).
func (c *BatchClient) WatchMembers(ctx context.Context, update func(Membership)) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(c.pc.closing, cancel)() // Close ends the stream
	stream, err := pb.NewClusterClient(c.pc.conn).WatchMembers(ctx, &pb.WatchMembersRequest{})
	for err == nil {
		var u *pb.MembersUpdate
		if u, err = stream.Recv(); err == nil {
			update(membershipFromPB(u))
		}
	}
	call := "watch " + c.pc.addr
	switch {
	case c.pc.closing.Err() != nil:
		return callFailed(call, ErrClosed, nil)
	case ctx.Err() != nil:
		return callFailed(call, nil, ctx.Err())
	case status.Code(err) == codes.Unimplemented:
		return callFailed(call, ErrNoCluster, nil)
	case status.Code(err) == codes.Unavailable:
		return callFailed(call, ErrUnavailable, err)
	}
	return callFailed(call, nil, err)
}
