package dial

import (
	"context"
	"errors"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/shardlimiter/shardlimiter/limit"
	"github.com/shardlimiter/shardlimiter/transport"
	"github.com/shardlimiter/shardlimiter/transport/pb"
)

// ErrNoLeases: the node does not serve the lease service (an older
// version).
var ErrNoLeases = errors.New("transport: node does not serve " + transport.LeasesServiceName)

// Lease asks the node for a grant of a key's capacity for this client
// process, or releases one (shardlimiter.v1.Leases, api/lease). r.From is
// the client's instance name; the node names the lessee by it and by the
// connection's identity. ctx bounds the call, as does the client's
// Timeout. Errors wrap transport.ErrPermissionDenied (the node does not
// let this client hold leases), ErrNoLeases, transport.ErrUnavailable,
// transport.ErrTimeout, transport.ErrOverloaded or transport.ErrClosed.
func (c *BatchClient) Lease(ctx context.Context, r limit.LeaseRequest) (limit.LeaseGrant, error) {
	if c.pc.closing.Err() != nil {
		return limit.LeaseGrant{}, transport.CallFailed("lease "+c.pc.addr, transport.ErrClosed, nil)
	}
	ctx, cancel := context.WithTimeout(ctx, c.pc.timeout)
	defer cancel()
	defer context.AfterFunc(c.pc.closing, cancel)()
	out := new(pb.LeaseResponse)
	err := c.pc.conn.Invoke(ctx, transport.LeaseMethod, transport.LeaseToProto(r), out, grpc.ForceCodecV2(transport.Codec))
	if err == nil {
		return transport.GrantFromProto(out), nil
	}
	call := "lease " + c.pc.addr
	var kind error
	switch status.Code(err) {
	case codes.PermissionDenied:
		kind = transport.ErrPermissionDenied
	case codes.Unimplemented:
		kind = ErrNoLeases
	case codes.Unavailable:
		kind = transport.ErrUnavailable
	case codes.DeadlineExceeded:
		kind = transport.ErrTimeout
	}
	switch {
	case c.pc.closing.Err() != nil:
		kind = transport.ErrClosed
	case transport.IsShed(err):
		kind = transport.ErrOverloaded
	}
	return limit.LeaseGrant{}, transport.CallFailed(call, kind, err)
}
