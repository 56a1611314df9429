package dial

import (
	"context"
	"fmt"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/status"

	"github.com/shardlimiter/shardlimiter/limit"
	"github.com/shardlimiter/shardlimiter/transport"
	"github.com/shardlimiter/shardlimiter/transport/pb"
	"github.com/shardlimiter/shardlimiter/transport/wire"
)

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
	// its gossip to catch up), so it gets at least transport.StateTimeout.
	t := max(cfg.Timeout, transport.StateTimeout)
	return &StateClient{
		addr: addr, name: self, conn: conn, client: pb.NewStateClient(conn),
		timeout: func(ctx context.Context) (context.Context, context.CancelFunc) { return context.WithTimeout(ctx, t) },
	}, nil
}

// Push sends keys to the node (see api/peers.StateService), encoded by package
// wire (pushRequest).
func (c *StateClient) Push(ctx context.Context, why limit.Transfer, partitions []int, keys []limit.KeyState) error {
	ctx, cancel := c.timeout(ctx)
	defer cancel()
	err := c.conn.Invoke(ctx, pb.State_Push_FullMethodName,
		&pushRequest{from: c.name, why: why, keys: keys, parts: partitions}, new(pb.PushStateResponse),
		grpc.ForceCodecV2(transport.Codec), grpc.MaxCallRecvMsgSize(transport.MaxStateMessage), grpc.MaxCallSendMsgSize(transport.MaxStateMessage), c.redial())
	return c.classify(err)
}

// pushRequest is a State.Push request, encoded as gRPC sends it.
type pushRequest struct {
	from  string
	why   limit.Transfer
	keys  []limit.KeyState
	parts []int
}

// Size is the length of the encoding (transport.Encoder).
func (r *pushRequest) Size() int { return wire.SizePush(r.from, int32(r.why), r.keys, r.parts) }

// AppendTo appends the encoding to b (transport.Encoder).
func (r *pushRequest) AppendTo(b []byte) ([]byte, error) {
	return wire.AppendPush(b, r.from, int32(r.why), r.keys, r.parts)
}

// Pull takes over r.Partitions from the node (see api/peers.StateService);
// r.Members and r.Names are the member list of the ring that gives them to
// this node. r.From is this client's name.
func (c *StateClient) Pull(ctx context.Context, r limit.PullRequest) ([]limit.KeyState, error) {
	ctx, cancel := c.timeout(ctx)
	defer cancel()
	out, err := c.client.Pull(ctx, &pb.PullStateRequest{From: c.name, Partitions: transport.PartitionsToProto(r.Partitions), Members: r.Members,
		MemberNames: r.Names, Addr: r.Addr, PeerAddr: r.PeerAddr},
		grpc.MaxCallRecvMsgSize(transport.MaxStateMessage), grpc.MaxCallSendMsgSize(transport.MaxStateMessage), c.redial())
	if err != nil {
		return nil, c.classify(err)
	}
	return transport.KeysFromProto(out.GetKeys())
}

// Ring asks the node for the ring it routes by (see api/peers.RingReporter).
func (c *StateClient) Ring(ctx context.Context) (transport.RingInfo, error) {
	ctx, cancel := c.timeout(ctx)
	defer cancel()
	out, err := c.client.Ring(ctx, &pb.RingRequest{})
	if err != nil {
		return transport.RingInfo{}, c.classify(err)
	}
	return transport.RingInfo{Node: out.GetNode(), Version: out.GetRingVersion(), Members: out.GetMembers(), Names: out.GetMemberNames(),
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
		return transport.CallFailed(call, transport.ErrUnavailable, err)
	case codes.DeadlineExceeded:
		return transport.CallFailed(call, transport.ErrTimeout, err)
	}
	if transport.IsShed(err) {
		return transport.CallFailed(call, transport.ErrOverloaded, err)
	}
	return transport.CallFailed(call, nil, err)
}

// Close closes the connection.
func (c *StateClient) Close() error { return c.conn.Close() }

// Inspect asks the node what it holds of c's key (State.Inspect).
func (c *StateClient) Inspect(ctx context.Context, check limit.Check) (limit.KeyView, error) {
	ctx, cancel := c.timeout(ctx)
	defer cancel()
	out, err := c.client.Inspect(ctx, &pb.InspectKeyRequest{Request: transport.RequestOfInspect(check)})
	if err != nil {
		return limit.KeyView{}, c.classify(err)
	}
	return transport.ViewFromPB(out), nil
}

// Lease asks the node for a grant of a key's capacity, or releases one
// (State.Lease; see api/peers.Leaser).
func (c *StateClient) Lease(ctx context.Context, r limit.LeaseRequest) (limit.LeaseGrant, error) {
	r.From = c.name
	out, err := c.client.Lease(ctx, transport.LeaseToProto(r))
	if err != nil {
		return limit.LeaseGrant{}, c.classify(err)
	}
	return transport.GrantFromProto(out), nil
}
