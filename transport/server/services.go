package server

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/grpc"

	"github.com/shardlimiter/shardlimiter/transport"
)

// A checks service (shardlimiter.v1's RateLimiter for clients, Peers for
// nodes) is registered with a descriptor of our own rather than the
// generated one, so that its handlers receive the request as the codec
// decoded it and return the answer for the codec to encode (messages.go:
// no pb message per item). Names, methods and the proto file are the
// generated ones: on the wire, and to server reflection (which describes
// the services from the registered proto file), nothing differs. Unary
// interceptors see a *checkBatch as the request and a *ResultBatch as the
// response, which goes back to a pool once encoded (messages.go): an
// interceptor must not keep it past its return. The batches of the stream
// methods pass no interceptor but the stream's.

// Role is what a checks service is to the node.
type Role uint8

const (
	// Clients: the client API. Its items may use the public algorithms
	// only, and each answer names the node that decided it.
	Clients Role = iota
	// Peers: the node-to-node API. Its items may hold what only nodes
	// send each other (wire.Checks.Internal), and the owner is named once
	// per batch.
	Peers
)

// RegisterChecks registers gen, a generated descriptor of a service with
// one unary method and one stream method that both carry batches of checks
// (GetRateLimitsRequest in, GetRateLimitsResponse or
// ForwardRateLimitsResponse out), answered by c. Its calls take units of
// the listener's bound: charged at their headers on a fair bound, refused
// there while another bound is full, and settled to their item count once
// decoded. Each call is counted in the listener's metrics under api "grpc"
// and the unary method's name, stream batches included.
func (l *Listener) RegisterChecks(gen *grpc.ServiceDesc, c transport.Checker, role Role) {
	name := gen.Methods[0].MethodName
	desc := &grpc.ServiceDesc{
		ServiceName: gen.ServiceName,
		HandlerType: (*checksService)(nil),
		Methods:     []grpc.MethodDesc{{MethodName: name, Handler: handleChecks("/" + gen.ServiceName + "/" + name)}},
		Metadata:    gen.Metadata,
	}
	if len(gen.Streams) > 0 { // without: a unary service, as an older node's
		stream := gen.Streams[0]
		stream.Handler = handleStream(l.streams)
		desc.Streams = []grpc.StreamDesc{stream}
		l.methods["/"+gen.ServiceName+"/"+stream.StreamName] |= admitFair | admitStream
	}
	srv := &checksServer{
		h:     l.Batches(c, l.name),
		role:  role,
		calls: l.cfg.Metrics.Calls("grpc", name, false),
	}
	l.Register(desc, srv)
	l.methods["/"+gen.ServiceName+"/"+name] |= admitFair
}

// checksService is a service whose single method answers a batch.
type checksService interface {
	// newBatch returns an empty request bounded by the service's MaxBatch.
	newBatch() *checkBatch
	serveChecks(ctx context.Context, in *checkBatch) (any, error)
}

// handleChecks is the grpc.MethodHandler of a checksService method.
func handleChecks(fullMethod string) grpc.MethodHandler {
	return func(srv any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) {
		s := srv.(checksService)
		in := s.newBatch()
		defer in.release()
		var ok bool
		if in.ticket, ok = claimTicket(ctx); !ok {
			return nil, transport.GRPCError(errCanceled)
		} else if in.ticket == nil {
			in.ticket = in.bound.connTicket(ctx, &in.own)
		}
		if err := dec(in); err != nil {
			return nil, err
		}
		if interceptor == nil {
			return s.serveChecks(ctx, in)
		}
		info := &grpc.UnaryServerInfo{Server: srv, FullMethod: fullMethod}
		return interceptor(ctx, in, info, func(ctx context.Context, req any) (any, error) {
			return s.serveChecks(ctx, req.(*checkBatch))
		})
	}
}

// errCanceled answers a call whose context ended between its headers and
// its handler: nothing of it was read or decided.
var errCanceled = fmt.Errorf("transport: call ended before it was decided: %w", context.Canceled)

// checksServer is a registered checks service.
type checksServer struct {
	h     *Batches
	role  Role
	calls *Calls
}

func (s *checksServer) newBatch() *checkBatch {
	return &checkBatch{max: s.h.maxBatch, bound: s.h.inflight, internal: s.role == Peers}
}

func (s *checksServer) serveChecks(ctx context.Context, in *checkBatch) (any, error) {
	start := time.Now()
	out, err := s.h.decideBatch(ctx, in, s.role == Peers)
	s.calls.ObserveGRPC(transport.Code(err), in.n, time.Since(start))
	if err != nil {
		return nil, transport.GRPCError(err)
	}
	return out, nil
}
