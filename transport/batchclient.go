package transport

import (
	"context"
	"fmt"

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
// not be answered (errors.Is ErrUnavailable, ErrTimeout, ErrOverloaded,
// ErrClosed; those checks carry Reason limit.Unavailable), nil results and
// an error wrapping ctx.Err() when ctx ended first.
func (c *BatchClient) GetRateLimits(ctx context.Context, checks []limit.Check) ([]limit.Result, error) {
	return c.pc.Forward(ctx, checks)
}

// Close answers every accepted check not yet answered with ErrClosed, ends
// the RPCs and streams in flight and closes the connection. It is
// idempotent.
func (c *BatchClient) Close() error { return c.pc.Close() }
