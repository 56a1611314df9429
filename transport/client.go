package transport

import (
	"context"
	"fmt"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/shardlimiter/shardlimiter/limit"
	"github.com/shardlimiter/shardlimiter/transport/pb"
)

// Client is the public client of the RateLimiter service, for tools and
// applications written in Go. It is safe for concurrent use.
type Client struct {
	addr string
	conn *grpc.ClientConn
}

// Dial prepares a client for the server at addr (host:port or any gRPC
// target). It connects lazily. opts follow the defaults (plaintext
// credentials, static flow-control windows of FlowWindow), so they can
// override them.
func Dial(addr string, opts ...grpc.DialOption) (*Client, error) {
	opts = append([]grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithStaticStreamWindowSize(FlowWindow),
		grpc.WithStaticConnWindowSize(FlowWindow),
	}, opts...)
	conn, err := grpc.NewClient(addr, opts...)
	if err != nil {
		return nil, fmt.Errorf("transport: dial %s: %w", addr, err)
	}
	return &Client{addr: addr, conn: conn}, nil
}

// GetRateLimits asks the server to decide checks and returns one Result per
// check, in order. Per-item failures are in Result.Error and Result.Reason.
// The error reports a failed call: errors.Is(err, ErrUnavailable),
// ErrTimeout or ErrOverloaded (the server shed the call; nothing was
// decided; retry after RetryDelay(err)) tell the common kinds apart;
// status.Code(err) gives the gRPC code of any other.
func (c *Client) GetRateLimits(ctx context.Context, checks []limit.Check) ([]limit.Result, error) {
	// The request and the reply are types of ours that the codec encodes
	// and decodes through package wire: no pb message per item.
	reply := resultsReply{max: len(checks), results: make([]limit.Result, 0, len(checks))}
	err := c.conn.Invoke(ctx, pb.RateLimiter_GetRateLimits_FullMethodName, &checksRequest{checks: checks}, &reply,
		grpc.ForceCodecV2(theCodec))
	if err != nil {
		return nil, c.classify(err)
	}
	if len(reply.results) != len(checks) {
		return nil, fmt.Errorf("transport: %s answered %d of %d checks", c.addr, len(reply.results), len(checks))
	}
	return reply.results, nil
}

func (c *Client) classify(err error) error {
	switch status.Code(err) {
	case codes.Unavailable:
		return callFailed(c.addr, ErrUnavailable, err)
	case codes.DeadlineExceeded:
		return callFailed(c.addr, ErrTimeout, err)
	}
	if IsShed(err) {
		return callFailed(c.addr, ErrOverloaded, err)
	}
	return callFailed(c.addr, nil, err)
}

// Close closes the connection; calls in flight fail.
func (c *Client) Close() error { return c.conn.Close() }
