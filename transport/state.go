package transport

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/shardlimiter/shardlimiter/limit"
	"github.com/shardlimiter/shardlimiter/transport/internal/wire"
	"github.com/shardlimiter/shardlimiter/transport/pb"
)

// StateService answers shardlimiter.v1.State: the moving of key states
// between nodes (handoff and replication). The node implements it.
// Methods are called concurrently.
type StateService interface {
	// Push merges keys into this node's tables. For a handoff, partitions
	// lists the ring partitions from has handed over whole.
	Push(ctx context.Context, from string, why limit.Transfer, partitions []int, keys []limit.KeyState) error
	// Pull hands over everything this node holds in partitions to from,
	// whose ring (of the member list with fingerprint members) gives it
	// those partitions.
	Pull(ctx context.Context, from string, members uint64, partitions []int) ([]limit.KeyState, error)
}

// RingInfo is the ring a node routes by, as State's Ring call reports it.
type RingInfo struct {
	Node    string
	Version uint64 // tells this node's rings apart; unrelated across nodes
	// Members fingerprints the member list (as StateService.Pull's
	// members): equal fingerprints, same members.
	Members uint64
	Names   []string // the members' names, sorted
	Ready   bool     // joined and owning its ring slice
	Leaving bool
}

// RingReporter is implemented by a StateService that answers State's Ring
// call; without it the call is Unimplemented. Ring is called concurrently
// and must not block.
type RingReporter interface {
	Ring() RingInfo
}

// MaxStateMessage bounds a State message, in bytes, both ways; senders
// split larger transfers. It is also the gRPC receive limit of the server
// and the clients for State calls.
const MaxStateMessage = 16 << 20

// StateTimeout is the least time a State call is given (PeerConfig.Timeout
// when longer).
const StateTimeout = 2 * time.Second

// maxStatePartitions bounds the partitions named in one State call.
const maxStatePartitions = 1 << 20

// stateServer adapts a StateService to the generated service.
type stateServer struct {
	pb.UnimplementedStateServer
	s        StateService
	inflight *InFlight // shared with the Peers service of the listener
	metrics  *Metrics
}

// admit takes units of the listener's in-flight bound, or answers the
// refusal; release gives them back.
func (s *stateServer) admit(units int) (release func(), err error) {
	u, err := s.inflight.acquireChecks(units, s.metrics, listenerPeer)
	if err != nil {
		return nil, grpcError(err)
	}
	return func() { s.inflight.Release(u) }, nil
}

// stateServiceDesc is the generated descriptor of State with Push served by
// handlePush: its request is decoded by package wire straight into key
// states (pushBatch), as the checks of Peers are (services.go). Pull keeps
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

func (b *pushBatch) decode(data []byte) error {
	b.p, b.err = wire.DecodePush(data, maxPushKeys)
	return nil
}

// maxPushKeys bounds the keys of one push: the most a message of
// MaxStateMessage bytes can hold (2 bytes each, empty).
const maxPushKeys = MaxStateMessage / 2

func (s *stateServer) push(ctx context.Context, in *pushBatch) (*pb.PushStateResponse, error) {
	if s.s == nil {
		return nil, status.Error(codes.Unimplemented, errNoState.Error())
	}
	if in.err != nil {
		return nil, status.Error(codes.InvalidArgument, in.err.Error())
	}
	release, err := s.admit(len(in.p.Keys))
	if err != nil {
		return nil, err
	}
	defer release()
	if in.p.Transfer < 0 || int(in.p.Transfer) >= len(limit.Transfers()) {
		return nil, status.Errorf(codes.InvalidArgument, "transport: unknown transfer %d", in.p.Transfer)
	}
	parts, err := partitionsFromProto(in.p.Partitions)
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	if err := s.s.Push(ctx, in.p.From, limit.Transfer(in.p.Transfer), parts, in.p.Keys); err != nil {
		return nil, status.Error(Code(err), err.Error())
	}
	return &pb.PushStateResponse{}, nil
}

func (s *stateServer) Pull(ctx context.Context, in *pb.PullStateRequest) (*pb.PullStateResponse, error) {
	if s.s == nil {
		return nil, status.Error(codes.Unimplemented, errNoState.Error())
	}
	release, err := s.admit(1)
	if err != nil {
		return nil, err
	}
	defer release()
	parts, err := partitionsFromProto(in.GetPartitions())
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	keys, err := s.s.Pull(ctx, in.GetFrom(), in.GetMembers(), parts)
	if err != nil {
		return nil, status.Error(Code(err), err.Error())
	}
	return &pb.PullStateResponse{Keys: keysToProto(keys)}, nil
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

func keysFromProto(in []*pb.KeyState) ([]limit.KeyState, error) {
	out := make([]limit.KeyState, len(in))
	for i, k := range in {
		a := k.GetAlgorithm()
		if a < pb.Algorithm_TOKEN_BUCKET || a > pb.Algorithm(limit.GubernatorLeakyBucket) { // the gubernator algorithms' numbers are internal
			return nil, fmt.Errorf("transport: key state %d: unknown algorithm %d", i, int32(a))
		}
		out[i] = limit.KeyState{Algorithm: limit.Algorithm(a), Key: string(k.GetKey()), State: k.GetState()}
	}
	return out, nil
}

func keysToProto(in []limit.KeyState) []*pb.KeyState {
	out := make([]*pb.KeyState, len(in))
	msgs := make([]pb.KeyState, len(in))
	for i, k := range in {
		msgs[i] = pb.KeyState{Algorithm: pb.Algorithm(k.Algorithm), Key: []byte(k.Key), State: k.State}
		out[i] = &msgs[i]
	}
	return out
}

func partitionsFromProto(in []uint32) ([]int, error) {
	if len(in) > maxStatePartitions {
		return nil, fmt.Errorf("transport: %d partitions in one call, max %d", len(in), maxStatePartitions)
	}
	out := make([]int, len(in))
	for i, p := range in {
		out[i] = int(p)
	}
	return out, nil
}

func partitionsToProto(in []int) []uint32 {
	out := make([]uint32, len(in))
	for i, p := range in {
		out[i] = uint32(p)
	}
	return out
}

// StateClient calls one node's State service. It is safe for concurrent use.
type StateClient struct {
	addr    string
	name    string // this node's name, sent as from
	client  pb.StateClient
	conn    *grpc.ClientConn
	timeout func(context.Context) (context.Context, context.CancelFunc)
}

// NewStateClient prepares a client for the node at addr; self is this
// node's name. It connects lazily. cfg's Timeout bounds each call and its
// DialOptions apply (credentials).
func NewStateClient(addr, self string, cfg PeerConfig) (*StateClient, error) {
	conn, err := dialPeer(addr, cfg)
	if err != nil {
		return nil, fmt.Errorf("transport: state client for %s: %w", addr, err)
	}
	// A transfer may wait on the other side (for its own transfers, for
	// its gossip to catch up), so it gets at least StateTimeout.
	t := max(cfg.Timeout, StateTimeout)
	return &StateClient{
		addr: addr, name: self, conn: conn, client: pb.NewStateClient(conn),
		timeout: func(ctx context.Context) (context.Context, context.CancelFunc) { return context.WithTimeout(ctx, t) },
	}, nil
}

// Push sends keys to the node (see StateService.Push), encoded by package
// wire (pushRequest).
func (c *StateClient) Push(ctx context.Context, why limit.Transfer, partitions []int, keys []limit.KeyState) error {
	ctx, cancel := c.timeout(ctx)
	defer cancel()
	err := c.conn.Invoke(ctx, pb.State_Push_FullMethodName,
		&pushRequest{from: c.name, why: why, keys: keys, parts: partitions}, new(pb.PushStateResponse),
		grpc.ForceCodecV2(theCodec), grpc.MaxCallRecvMsgSize(MaxStateMessage), grpc.MaxCallSendMsgSize(MaxStateMessage), c.redial())
	return c.classify(err)
}

// pushRequest is a State.Push request, encoded as gRPC sends it.
type pushRequest struct {
	from  string
	why   limit.Transfer
	keys  []limit.KeyState
	parts []int
}

func (r *pushRequest) size() int { return wire.SizePush(r.from, int32(r.why), r.keys, r.parts) }

func (r *pushRequest) appendTo(b []byte) ([]byte, error) {
	return wire.AppendPush(b, r.from, int32(r.why), r.keys, r.parts)
}

// Pull takes over partitions from the node (see StateService.Pull); members
// fingerprints the member list of the ring that gives them to this node.
func (c *StateClient) Pull(ctx context.Context, members uint64, partitions []int) ([]limit.KeyState, error) {
	ctx, cancel := c.timeout(ctx)
	defer cancel()
	out, err := c.client.Pull(ctx, &pb.PullStateRequest{From: c.name, Partitions: partitionsToProto(partitions), Members: members},
		grpc.MaxCallRecvMsgSize(MaxStateMessage), grpc.MaxCallSendMsgSize(MaxStateMessage), c.redial())
	if err != nil {
		return nil, c.classify(err)
	}
	return keysFromProto(out.GetKeys())
}

// Ring asks the node for the ring it routes by (see RingReporter).
func (c *StateClient) Ring(ctx context.Context) (RingInfo, error) {
	ctx, cancel := c.timeout(ctx)
	defer cancel()
	out, err := c.client.Ring(ctx, &pb.RingRequest{})
	if err != nil {
		return RingInfo{}, c.classify(err)
	}
	return RingInfo{Node: out.GetNode(), Version: out.GetRingVersion(), Members: out.GetMembers(), Names: out.GetMemberNames(),
		Ready: out.GetReady(), Leaving: out.GetLeaving()}, nil
}

// redial is the call option of a state move. A connection whose last dial
// failed (its node was unreachable: a partition, since healed) fails its
// calls at once with that old error until its backoff (up to 2 s) ends, and
// a dial begun in the partition may still hang after the heal: all three
// tries of the first pushes after a heal failed so. Such a connection
// dials again now, and the call waits for a connection, within its
// deadline, instead of failing on the old error.
func (c *StateClient) redial() grpc.CallOption {
	if c.conn.GetState() != connectivity.TransientFailure {
		return grpc.EmptyCallOption{}
	}
	c.conn.ResetConnectBackoff()
	return grpc.WaitForReady(true)
}

func (c *StateClient) classify(err error) error {
	if err == nil {
		return nil
	}
	call := "state " + c.addr
	switch status.Code(err) {
	case codes.Unavailable:
		return callFailed(call, ErrUnavailable, err)
	case codes.DeadlineExceeded:
		return callFailed(call, ErrTimeout, err)
	}
	if IsShed(err) {
		return callFailed(call, ErrOverloaded, err)
	}
	return callFailed(call, nil, err)
}

// Close closes the connection.
func (c *StateClient) Close() error { return c.conn.Close() }

// errNoState answers State calls on a server without a StateService.
var errNoState = errors.New("transport: this node does not move state")

// standinHeader marks a Peers call whose checks the receiver decides as the
// stand-in of their unreachable owner (see PeerConfig.Standin).
const standinHeader = "shardlimiter-standin"

// IsStandin reports whether the Peers call of ctx asks the receiver to
// decide its checks as the stand-in of their owner, which could not be
// reached: the receiver holds their replicas.
func IsStandin(ctx context.Context) bool {
	md, ok := metadata.FromIncomingContext(ctx)
	return ok && len(md.Get(standinHeader)) > 0
}

// WithStandin returns ctx marked as a stand-in call, as the receiver of a
// stand-in forward sees it (for tests of the receiving side).
func WithStandin(ctx context.Context) context.Context {
	return metadata.NewIncomingContext(ctx, metadata.Pairs(standinHeader, "1"))
}
