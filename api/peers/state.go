package peers

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/shardlimiter/shardlimiter/limit"
	"github.com/shardlimiter/shardlimiter/transport"
	"github.com/shardlimiter/shardlimiter/transport/pb"
	"github.com/shardlimiter/shardlimiter/transport/server"
	"github.com/shardlimiter/shardlimiter/transport/wire"
)

// StateService answers shardlimiter.v1.State: the moving of key states
// between nodes (handoff and replication). The node implements it.
// Methods are called concurrently.
type StateService interface {
	// Push merges keys into this node's tables. For a handoff, partitions
	// lists the ring partitions from has handed over whole.
	Push(ctx context.Context, from string, why limit.Transfer, partitions []int, keys []limit.KeyState) error
	// Pull hands over everything this node holds in r.Partitions to
	// r.From, whose ring (of the member list r.Members fingerprints and
	// r.Names lists) gives it those partitions.
	Pull(ctx context.Context, r limit.PullRequest) ([]limit.KeyState, error)
}

// RingReporter is implemented by a StateService that answers State's Ring
// call; without it the call is Unimplemented. Ring is called concurrently
// and must not block.
type RingReporter interface {
	Ring() transport.RingInfo
}

// stateServer adapts a StateService to the generated service.
type stateServer struct {
	pb.UnimplementedStateServer
	s StateService
	l *server.Listener // its bound is shared with the Peers service
}

// admit takes units of the listener's in-flight bound, or answers the
// refusal; Release gives them back.
func (s *stateServer) admit(units int) (server.Held, error) {
	held, err := s.l.Acquire(units)
	if err != nil {
		return held, transport.GRPCError(err)
	}
	return held, nil
}

// stateServiceDesc is the generated descriptor of State with Push served by
// handlePush: its request is decoded by package wire straight into key
// states (pushBatch), as the checks of Peers are
// (transport/server/services.go). Pull keeps
// the generated handler: a handoff's pull is rare.
func stateServiceDesc() *grpc.ServiceDesc {
	d := pb.State_ServiceDesc
	d.Methods = slices.Clone(d.Methods)
	for i := range d.Methods {
		if d.Methods[i].MethodName == "Push" {
			d.Methods[i].Handler = handlePush
		}
	}
	return &d
}

// handlePush is the grpc.MethodHandler of State.Push. Unary interceptors
// see a *pushBatch as the request.
func handlePush(srv any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) {
	s := srv.(*stateServer)
	in := &pushBatch{}
	if err := dec(in); err != nil {
		return nil, err
	}
	if interceptor == nil {
		return s.push(ctx, in)
	}
	info := &grpc.UnaryServerInfo{Server: srv, FullMethod: pb.State_Push_FullMethodName}
	return interceptor(ctx, in, info, func(ctx context.Context, req any) (any, error) {
		return s.push(ctx, req.(*pushBatch))
	})
}

// pushBatch is a State.Push request as the codec decoded it. A malformed
// one is recorded in err, to be answered with InvalidArgument (gRPC would
// turn a codec error into Internal).
type pushBatch struct {
	p   wire.Push
	err error
}

// Decode decodes the request (transport.Decoder).
func (b *pushBatch) Decode(data []byte) error {
	b.p, b.err = wire.DecodePush(data, maxPushKeys)
	return nil
}

// maxPushKeys bounds the keys of one push: the most a message of
// transport.MaxStateMessage bytes can hold (2 bytes each, empty).
const maxPushKeys = transport.MaxStateMessage / 2

// maxPullNames bounds the member names of one pull (a ring has at most
// 65535 members).
const maxPullNames = 1 << 16

func (s *stateServer) push(ctx context.Context, in *pushBatch) (*pb.PushStateResponse, error) {
	if s.s == nil {
		return nil, status.Error(codes.Unimplemented, errNoState.Error())
	}
	if in.err != nil {
		return nil, status.Error(codes.InvalidArgument, in.err.Error())
	}
	held, err := s.admit(len(in.p.Keys))
	if err != nil {
		return nil, err
	}
	defer held.Release()
	if in.p.Transfer < 0 || int(in.p.Transfer) >= len(limit.Transfers()) {
		return nil, status.Errorf(codes.InvalidArgument, "transport: unknown transfer %d", in.p.Transfer)
	}
	parts, err := transport.PartitionsFromProto(in.p.Partitions)
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	if err := s.s.Push(ctx, in.p.From, limit.Transfer(in.p.Transfer), parts, in.p.Keys); err != nil {
		return nil, status.Error(transport.Code(err), err.Error())
	}
	return &pb.PushStateResponse{}, nil
}

func (s *stateServer) Pull(ctx context.Context, in *pb.PullStateRequest) (*pb.PullStateResponse, error) {
	if s.s == nil {
		return nil, status.Error(codes.Unimplemented, errNoState.Error())
	}
	held, err := s.admit(1)
	if err != nil {
		return nil, err
	}
	defer held.Release()
	parts, err := transport.PartitionsFromProto(in.GetPartitions())
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	if n := len(in.GetMemberNames()); n > maxPullNames {
		return nil, status.Error(codes.InvalidArgument, fmt.Sprintf("peers: %d member names in a pull, max %d", n, maxPullNames))
	}
	keys, err := s.s.Pull(ctx, limit.PullRequest{From: in.GetFrom(), Members: in.GetMembers(), Names: in.GetMemberNames(),
		Addr: in.GetAddr(), PeerAddr: in.GetPeerAddr(), Partitions: parts})
	if err != nil {
		return nil, status.Error(transport.Code(err), err.Error())
	}
	return &pb.PullStateResponse{Keys: transport.KeysToProto(keys)}, nil
}

func (s *stateServer) Ring(ctx context.Context, _ *pb.RingRequest) (*pb.RingResponse, error) {
	r, ok := s.s.(RingReporter)
	if !ok {
		return nil, status.Error(codes.Unimplemented, "transport: this node does not describe its ring")
	}
	info := r.Ring()
	return &pb.RingResponse{Node: info.Node, RingVersion: info.Version, Members: info.Members, MemberNames: info.Names,
		Ready: info.Ready, Leaving: info.Leaving}, nil
}

// errNoState answers State calls on a server without a StateService.
var errNoState = errors.New("transport: this node does not move state")

// LocalInspector answers State.Inspect on the peer port: what this node
// holds of c's key under c's rule, whoever owns it, read without changing
// anything and never forwarded. A StateService that also implements it
// serves State.Inspect; others answer Unimplemented.
type LocalInspector interface {
	InspectLocal(ctx context.Context, c limit.Check) (limit.KeyView, error)
}

// Inspect serves State.Inspect for a StateService that is a LocalInspector.
func (s *stateServer) Inspect(ctx context.Context, req *pb.InspectKeyRequest) (*pb.KeyView, error) {
	li, ok := s.s.(LocalInspector)
	if !ok {
		return nil, status.Error(codes.Unimplemented, "transport: this node does not inspect keys")
	}
	c, err := transport.CheckOfInspect(req.GetRequest())
	if err != nil {
		return nil, transport.GRPCError(err)
	}
	v, err := li.InspectLocal(ctx, c)
	if err != nil {
		return nil, transport.GRPCError(err)
	}
	return transport.ViewToPB(v), nil
}

// Leaser answers State.Lease: grants of a share of a key's capacity to
// another node, and their release (peer/lease.go). A StateService that
// also implements it serves State.Lease; others answer Unimplemented.
// Lease must not forward: a node that does not decide the key says so in
// LeaseGrant.NotOwner.
type Leaser interface {
	Lease(ctx context.Context, r limit.LeaseRequest) (limit.LeaseGrant, error)
}

// Lease serves State.Lease for a StateService that is a Leaser.
func (s *stateServer) Lease(ctx context.Context, req *pb.LeaseRequest) (*pb.LeaseResponse, error) {
	l, ok := s.s.(Leaser)
	if !ok {
		return nil, status.Error(codes.Unimplemented, "transport: this node grants no leases")
	}
	r, err := transport.LeaseFromProto(req)
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	held, err := s.admit(1)
	if err != nil {
		return nil, err
	}
	defer held.Release()
	g, err := l.Lease(ctx, r)
	if err != nil {
		return nil, transport.GRPCError(err)
	}
	return transport.GrantToProto(g), nil
}
