package dial

import (
	"context"
	"fmt"

	"github.com/shardlimiter/shardlimiter/transport"

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
// credentials, static flow-control windows of transport.FlowWindow), so they can
// override them.
func Dial(addr string, opts ...grpc.DialOption) (*Client, error) {
	opts = append([]grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithStaticStreamWindowSize(transport.FlowWindow),
		grpc.WithStaticConnWindowSize(transport.FlowWindow),
	}, opts...)
	conn, err := grpc.NewClient(addr, opts...)
	if err != nil {
		return nil, fmt.Errorf("transport: dial %s: %w", addr, err)
	}
	return &Client{addr: addr, conn: conn}, nil
}

// GetRateLimits asks the server to decide checks and returns one Result per
// check, in order. Per-item failures are in Result.Error and Result.Reason.
// The error reports a failed call: errors.Is(err, transport.ErrUnavailable),
// transport.ErrTimeout or transport.ErrOverloaded (the server shed the call; nothing was
// decided; retry after transport.RetryDelay(err)) tell the common kinds apart;
// status.Code(err) gives the gRPC code of any other.
func (c *Client) GetRateLimits(ctx context.Context, checks []limit.Check) ([]limit.Result, error) {
	// The request and the reply are types of ours that the codec encodes
	// and decodes through package wire: no pb message per item.
	reply := resultsReply{max: len(checks), results: make([]limit.Result, 0, len(checks))}
	err := c.conn.Invoke(ctx, pb.RateLimiter_GetRateLimits_FullMethodName, &checksRequest{checks: checks}, &reply,
		grpc.ForceCodecV2(transport.Codec))
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
		return transport.CallFailed(c.addr, transport.ErrUnavailable, err)
	case codes.DeadlineExceeded:
		return transport.CallFailed(c.addr, transport.ErrTimeout, err)
	}
	if transport.IsShed(err) {
		return transport.CallFailed(c.addr, transport.ErrOverloaded, err)
	}
	return transport.CallFailed(c.addr, nil, err)
}

// Close closes the connection; calls in flight fail.
func (c *Client) Close() error { return c.conn.Close() }

// Inspect reads c's key on its owner without spending (the Inspect
// service; see Inspector). A zero c.Rule names a rule of the server's
// rules file.
func (c *Client) Inspect(ctx context.Context, check limit.Check) (limit.Inspection, error) {
	out, err := pb.NewInspectClient(c.conn).InspectKey(ctx, &pb.InspectKeyRequest{Request: transport.RequestOfInspect(check)})
	if err != nil {
		return limit.Inspection{}, fmt.Errorf("transport: inspect on %s: %w", c.addr, err)
	}
	res := limit.Inspection{Owner: transport.ViewFromPB(out.GetOwnerState())}
	if out.GetReplicaState() != nil {
		res.Replica = transport.ViewFromPB(out.GetReplicaState())
	}
	return res, nil
}

// Conn returns the client's connection, for calls of other services of
// the node on it (health, reflection, gubernator's API).
func (c *Client) Conn() *grpc.ClientConn { return c.conn }
