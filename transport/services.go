package transport

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// The RateLimiter and Peers services are registered with descriptors of our
// own rather than the generated ones, so that their handlers receive the
// request as the codec decoded it and return the answer for the codec to
// encode (messages.go: no pb message per item). Names, methods and the
// proto file are the generated ones: on the wire, and to server reflection
// (which describes the services from the registered proto file), nothing
// differs. Unary interceptors see a *checkBatch as the request and a
// *resultBatch as the response; the batches of the stream methods pass no
// interceptor but the stream's.

// checksService is a service whose single method answers a batch.
type checksService interface {
	// newBatch returns an empty request bounded by the service's MaxBatch.
	newBatch() *checkBatch
	serveChecks(ctx context.Context, in *checkBatch) (any, error)
}

// checksServiceDesc copies a generated descriptor, with our handlers: the
// unary method's and the stream method's (streamserver.go), whose streams
// stop with streams.
func checksServiceDesc(gen *grpc.ServiceDesc, streams *streamSet) *grpc.ServiceDesc {
	name := gen.Methods[0].MethodName
	stream := gen.Streams[0]
	stream.Handler = handleStream(streams)
	return &grpc.ServiceDesc{
		ServiceName: gen.ServiceName,
		HandlerType: (*checksService)(nil),
		Methods:     []grpc.MethodDesc{{MethodName: name, Handler: handleChecks("/" + gen.ServiceName + "/" + name)}},
		Streams:     []grpc.StreamDesc{stream},
		Metadata:    gen.Metadata,
	}
}

// handleChecks is the grpc.MethodHandler of a checksService method.
func handleChecks(fullMethod string) grpc.MethodHandler {
	return func(srv any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) {
		s := srv.(checksService)
		in := s.newBatch()
		defer in.release()
		var ok bool
		if in.ticket, ok = claimTicket(ctx); !ok {
			return nil, grpcError(errCanceled)
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

// rateLimiterServer is the client-facing service.
type rateLimiterServer struct {
	h *batchHandler
}

func (s *rateLimiterServer) newBatch() *checkBatch {
	return &checkBatch{max: s.h.maxBatch, bound: s.h.inflight}
}

func (s *rateLimiterServer) serveChecks(ctx context.Context, in *checkBatch) (any, error) {
	start := time.Now()
	out, err := s.h.decideBatch(ctx, in, false)
	s.h.metrics.observeGRPC(methodGet, Code(err), in.n, time.Since(start))
	if err != nil {
		return nil, grpcError(err)
	}
	return out, nil
}

// peersServer is the node-to-node service; h is nil when no Local checker
// was configured.
type peersServer struct {
	h *batchHandler
}

func (s *peersServer) newBatch() *checkBatch {
	if s.h == nil {
		return &checkBatch{max: DefaultMaxBatch, internal: true}
	}
	return &checkBatch{max: s.h.maxBatch, bound: s.h.inflight, internal: true}
}

func (s *peersServer) serveChecks(ctx context.Context, in *checkBatch) (any, error) {
	if s.h == nil {
		return nil, status.Error(codes.Unimplemented, "transport: this node does not answer peers")
	}
	start := time.Now()
	out, err := s.h.decideBatch(ctx, in, true)
	s.h.metrics.observeGRPC(methodForward, Code(err), in.n, time.Since(start))
	if err != nil {
		return nil, grpcError(err)
	}
	return out, nil
}
