package native

import (
	"context"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/shardlimiter/shardlimiter/ring"
	"github.com/shardlimiter/shardlimiter/transport"
	"github.com/shardlimiter/shardlimiter/transport/pb"
)

// The Cluster service (cluster.proto) tells clients the ring, so that they
// send each check to its owner. It is served on the client listener when
// Register is given a MembershipSource. Each WatchMembers stream polls the node's ring
// version every MembersPollInterval (an atomic load) and sends the ring
// when it changed: one ticker per watching client, no subscription list in
// the node, and a change reaches clients at most one interval after the
// node rebuilt its ring (gossip takes seconds to notice a failure; this
// adds little).

// MembersPollInterval is how often a WatchMembers stream looks at the
// node's ring version.
const MembersPollInterval = 100 * time.Millisecond

// MembershipSource is what the Cluster service needs of a node. Its
// methods are called concurrently from the streams' goroutines and must
// not block; RingVersion is called every MembersPollInterval per stream
// and should be as cheap as an atomic load.
type MembershipSource interface {
	RingVersion() uint64
	Membership() ring.Membership
}

// clusterServer serves WatchMembers; its streams end when the listener
// stops (GracefulStop would otherwise wait for them).
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
			if err := stream.Send(transport.MembershipToPB(m)); err != nil {
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
