package dial

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/shardlimiter/shardlimiter/ring"
	"github.com/shardlimiter/shardlimiter/transport"
	"github.com/shardlimiter/shardlimiter/transport/pb"

	"github.com/shardlimiter/shardlimiter/limit"
)

// BatchClient is a client of one node's RateLimiter service (the client
// API) that merges the checks of concurrent callers into shared RPCs by the
// rule of PeerClient (see batcher.go): a call sends at once while one of
// MaxInFlight RPCs is free, so an idle node adds no latency; while all are
// busy, calls wait and leave together, up to MaxBatch checks per RPC. The
// node routes what it receives as any client call: checks it does not own
// are forwarded, once, to their owner.
//
// It is the building block of package client, one per node. Its methods
// are safe for concurrent use; Close may be called at any time, more than
// once. It starts goroutines only while RPCs are in flight (and for
// WatchMembers, the stream's own), none after Close and WatchMembers have
// returned.
type BatchClient struct {
	pc *PeerClient
}

// NewBatchClient prepares a client for the node at addr (host:port or any
// gRPC target). It connects lazily and starts no goroutine. cfg is read as
// for a PeerClient, except that Metrics and Standin are ignored (the
// metrics of a PeerClient count forwards between nodes).
func NewBatchClient(addr string, cfg PeerConfig) (*BatchClient, error) {
	cfg.Metrics, cfg.Standin = nil, false
	pc, err := NewPeerClient(addr, cfg)
	if err != nil {
		return nil, fmt.Errorf("transport: batch client for %s: %w", addr, err)
	}
	pc.api = true
	return &BatchClient{pc: pc}, nil
}

// Addr returns the address the client was created for.
func (c *BatchClient) Addr() string { return c.pc.addr }

// GetRateLimits asks the node to decide checks and returns one Result per
// check, in order. It does not retain checks. Errors are those of
// PeerClient.Forward: results and the first failure when some checks could
// not be answered (errors.Is transport.ErrUnavailable, transport.ErrTimeout, transport.ErrOverloaded,
// transport.ErrClosed; those checks carry Reason limit.Unavailable), nil results and
// an error wrapping ctx.Err() when ctx ended first.
func (c *BatchClient) GetRateLimits(ctx context.Context, checks []limit.Check) ([]limit.Result, error) {
	return c.pc.Forward(ctx, checks)
}

// Close answers every accepted check not yet answered with transport.ErrClosed, ends
// the RPCs and streams in flight and closes the connection. It is
// idempotent.
func (c *BatchClient) Close() error { return c.pc.Close() }

// ErrNoCluster: the node does not serve the Cluster service (an older
// version, or a listener without the Cluster API).
var ErrNoCluster = errors.New("transport: node does not serve " + transport.ClusterServiceName)

// WatchMembers calls update with the node's ring at once and after each
// change, from the calling goroutine, until ctx ends or the stream fails.
// It always returns an error: one wrapping ctx.Err(), ErrNoCluster, or the
// stream's failure (errors.Is transport.ErrUnavailable when the node went away or
// stopped).
func (c *BatchClient) WatchMembers(ctx context.Context, update func(ring.Membership)) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(c.pc.closing, cancel)() // Close ends the stream
	stream, err := pb.NewClusterClient(c.pc.conn).WatchMembers(ctx, &pb.WatchMembersRequest{})
	for err == nil {
		var u *pb.MembersUpdate
		if u, err = stream.Recv(); err == nil {
			update(transport.MembershipFromPB(u))
		}
	}
	call := "watch " + c.pc.addr
	switch {
	case c.pc.closing.Err() != nil:
		return transport.CallFailed(call, transport.ErrClosed, nil)
	case ctx.Err() != nil:
		return transport.CallFailed(call, nil, ctx.Err())
	case status.Code(err) == codes.Unimplemented:
		return transport.CallFailed(call, ErrNoCluster, nil)
	case status.Code(err) == codes.Unavailable:
		return transport.CallFailed(call, transport.ErrUnavailable, err)
	}
	return transport.CallFailed(call, nil, err)
}
