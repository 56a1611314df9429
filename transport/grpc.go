package transport

import (
	"context"
	"net"
	"runtime"
	"slices"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthgrpc "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/tap"

	"github.com/shardlimiter/shardlimiter/transport/gubpb"
	"github.com/shardlimiter/shardlimiter/transport/pb"
)

// GRPCConfig configures a GRPCServer.
type GRPCConfig struct {
	// Checker answers shardlimiter.v1.RateLimiter (clients). Nil: the
	// service is not served (Unimplemented), as on a peer listener.
	Checker Checker
	// Local answers shardlimiter.v1.Peers (other nodes). It must decide
	// locally and never forward again, so that a check takes one hop at
	// most. Nil: Peers is not served (Unimplemented), as on a client
	// listener: a client must not reach the call that decides without
	// routing.
	Local Checker
	// State answers shardlimiter.v1.State (other nodes moving key states
	// here). Nil: State is not served.
	State StateService
	// Members answers shardlimiter.v1.Cluster (clients learning the ring,
	// members.go). Nil: the service is not served.
	Members MembershipSource
	// Inspector answers shardlimiter.v1.Inspect (operators reading a key's
	// state without spending, inspect.go). Nil: the service is not served.
	Inspector Inspector
	// Gubernator answers gubernator's pb.gubernator.V1 (gubernator.go).
	// Nil: the service is not served.
	Gubernator *Gubernator
	// MaxBatch bounds the items of one call; a larger batch fails the whole
	// call with InvalidArgument. Zero means DefaultMaxBatch (1000). Larger
	// batches amortize more per-call cost but hold more memory per call.
	MaxBatch int
	// Metrics records every call; nil records nothing.
	Metrics *Metrics
	// InFlight bounds the work in progress of every service this server
	// answers: the checks of RateLimiter and Peers calls, the keys of State
	// pushes (one unit per Pull). A call that does not fit is refused at
	// once with ResourceExhausted and a retry delay (see [InFlight]), never
	// queued. With NewFairInFlight, RateLimiter calls are charged at their
	// headers and connections share the bound fairly (fair.go); Peers and
	// State take plain bounds. Nil means no bound. Give the client and the
	// peer listener bounds of their own, so that a flood of client calls
	// cannot starve the owners' forwarded traffic; the HTTP handler may
	// share the client's.
	InFlight *InFlight
	// ServerOptions are passed to grpc.NewServer (credentials, keepalive,
	// interceptors, message size limits). A codec option has no effect: the
	// server uses its own, which speaks standard proto (see codec.go); unary
	// interceptors of the two services see the request as decoded by it.
	ServerOptions []grpc.ServerOption
	// Register, when set, registers further services on the server before
	// it serves (the Envoy rate-limit service of package rls). They speak
	// standard proto: the codec passes messages it does not know to it.
	Register func(*grpc.Server)
	// ShedMethods are the full names ("/package.Service/Method") of methods
	// of services added by Register that take units of InFlight: refused
	// at their headers while it is full, as GetRateLimits is, and counted
	// as the client listener's sheds. Their handlers still take their
	// units themselves (BoundChecker). Other methods of those services are
	// never refused by the server.
	ShedMethods []string
}

// GRPCServer serves the services its config names (RateLimiter for
// clients; Peers and State for other nodes), grpc.health.v1.Health and
// server reflection on one port. A node runs two: the client listener and
// the peer listener. Health reports NOT_SERVING until SetServing(true). Its
// methods are safe for concurrent use.
type GRPCServer struct {
	srv      *grpc.Server
	health   *health.Server
	services []string // registered, as health reports them
	// stopWatches ends health Watch streams, which would otherwise keep
	// GracefulStop waiting for as long as a client watches.
	stopWatches context.CancelFunc
	// streams are the open streams of the stream methods, which stop
	// before GracefulStop for the same reason (streamserver.go).
	streams *streamSet
}

// Service names, as registered and as reported by health and reflection.
const (
	RateLimiterService = "shardlimiter.v1.RateLimiter"
	PeersService       = "shardlimiter.v1.Peers"
	StateServiceName   = "shardlimiter.v1.State"
)

// NewGRPCServer builds the server; it starts nothing until Serve.
func NewGRPCServer(cfg GRPCConfig) *GRPCServer {
	watching, stopWatches := context.WithCancel(context.Background())
	s := &GRPCServer{
		srv:         grpc.NewServer(serverOptions(cfg)...),
		health:      health.NewServer(),
		stopWatches: stopWatches,
		streams:     newStreamSet(),
	}
	s.services = []string{""}
	if cfg.Checker != nil {
		s.srv.RegisterService(checksServiceDesc(&pb.RateLimiter_ServiceDesc, s.streams), &rateLimiterServer{h: newBatchHandler(cfg.Checker, cfg.MaxBatch, cfg.Metrics, cfg.InFlight, listenerGRPC)})
		s.services = append(s.services, RateLimiterService)
	}
	if cfg.Local != nil {
		s.srv.RegisterService(checksServiceDesc(&pb.Peers_ServiceDesc, s.streams), &peersServer{h: newBatchHandler(cfg.Local, cfg.MaxBatch, cfg.Metrics, cfg.InFlight, listenerPeer)})
		s.services = append(s.services, PeersService)
	}
	if cfg.State != nil {
		s.srv.RegisterService(stateServiceDesc(), &stateServer{s: cfg.State, inflight: cfg.InFlight, metrics: cfg.Metrics})
		s.services = append(s.services, StateServiceName)
	}
	if cfg.Members != nil {
		pb.RegisterClusterServer(s.srv, &clusterServer{src: cfg.Members, stop: watching})
		s.services = append(s.services, ClusterServiceName)
	}
	if cfg.Inspector != nil {
		pb.RegisterInspectServer(s.srv, &inspectServer{in: cfg.Inspector, inflight: cfg.InFlight, metrics: cfg.Metrics})
		s.services = append(s.services, InspectServiceName)
	}
	if cfg.Gubernator != nil {
		gubpb.RegisterV1Server(s.srv, cfg.Gubernator)
		s.services = append(s.services, GubernatorServiceName)
	}
	if cfg.Register != nil {
		cfg.Register(s.srv)
	}
	healthgrpc.RegisterHealthServer(s.srv, &healthServer{Server: s.health, stop: watching})
	reflection.Register(s.srv)
	s.SetServing(false)
	return s
}

// serverOptions are the stream workers, then cfg's options, then the
// codec, which must win: the services hand it messages of ours (see
// codec.go), and the tap (so cfg.ServerOptions must not hold a
// grpc.InTapHandle of their own), which makes the stream methods'
// contexts cancelable (streamserver.go) and, with an InFlight bound,
// refuses calls while the bound is full.
//
// Stream workers: without them gRPC starts a goroutine per call, whose
// stack then grows (runtime.morestack, copystack) as the call descends
// into the node and, on an entry node, into the peer client's RPC: at
// moderate load that was ~9% of an entry node's CPU. A worker keeps its
// grown stack from call to call. When every worker is busy gRPC starts a
// goroutine as before, so a call never waits for a worker.
//
// Static flow-control windows: see FlowWindow.
func serverOptions(cfg GRPCConfig) []grpc.ServerOption {
	opts := []grpc.ServerOption{
		grpc.NumStreamWorkers(uint32(streamWorkers())),
		grpc.StaticStreamWindowSize(FlowWindow),
		grpc.StaticConnWindowSize(FlowWindow),
	}
	opts = append(opts, cfg.ServerOptions...)
	opts = append(opts, grpc.InTapHandle(serverTap(cfg.InFlight, cfg.Metrics, slices.Clone(cfg.ShedMethods))))
	return append(opts, grpc.ForceServerCodecV2(theCodec))
}

// FlowWindow is the HTTP/2 flow-control window, per stream and per
// connection, in bytes, that the node's gRPC servers and its peer clients
// grant: a fixed window instead of gRPC's dynamic one. The dynamic window
// is sized by BDP estimation: the receiver of data pings the sender and
// times the answer, again on the first data after every answer, so at a
// moderate load nearly every RPC cost a ping and its ack, two more write
// system calls and wake-ups across the two processes (a third of an
// owner's writes at 2,000 forwarded RPCs/s). 256 KiB holds several
// batches of the default maximum size in flight and passes ~500 MB/s per
// connection at 0.5 ms round trip; a message larger than the window (up
// to the receive limit) still arrives, in more round trips. It also bounds
// what one connection can make a server buffer unread.
const FlowWindow = 256 << 10

// streamWorkers is the number of gRPC stream workers of a server: two per
// CPU the runtime may use, so that calls waiting on a forward do not
// leave the CPUs without a worker.
func streamWorkers() int { return 2 * runtime.GOMAXPROCS(0) }

// serverTap is the server's tap. A stream method's context is made
// cancelable (withStreamCancel). With a fair bound b (NewFairInFlight), a
// RateLimiter call is charged its connection's estimate at its headers and
// refused there when that does not fit its share (fair.go); the handler
// settles the charge once the message is decoded. With another bound b, a
// call of the bounded services is refused at its headers while b is full
// (as are the other services' calls under a fair bound): no call of one check
// or more could be admitted, and refusing before the message arrives
// spares its transfer and decoding — under a flood that is most of the
// cost of a refusal, as the messages of many calls share one connection. A call that arrives while there is room is
// admitted or refused on its item count once its message is in (see
// checkBatch.decode). A stream is refused at its opening only: each batch
// it carries is admitted on its item count as a unary call's. The methods
// of shed (GRPCConfig.ShedMethods) are refused as GetRateLimits is. The
// tap runs on the connection's reader with its lock held: one atomic load
// while there is room; a scan of shed, and a counter when refusing, only
// while the bound is full.
func serverTap(b *InFlight, m *Metrics, shed []string) tap.ServerInHandle {
	refused := grpcError(errShed)
	return func(ctx context.Context, info *tap.Info) (context.Context, error) {
		fair := b != nil && b.fair != nil
		if fair && (info.FullMethodName == pb.RateLimiter_GetRateLimits_FullMethodName || info.FullMethodName == streamRateLimitsMethod) {
			var ok bool
			if ctx, ok = b.reserveConn(ctx); !ok {
				m.shed(listenerGRPC, shedChecks)
				return ctx, refused
			}
		} else if b.full() {
			switch info.FullMethodName {
			case pb.RateLimiter_GetRateLimits_FullMethodName, streamRateLimitsMethod:
				m.shed(listenerGRPC, shedChecks)
				return ctx, refused
			case pb.Peers_ForwardRateLimits_FullMethodName, streamForwardMethod, pb.State_Push_FullMethodName, pb.State_Pull_FullMethodName:
				m.shed(listenerPeer, shedChecks)
				return ctx, refused
			}
			if slices.Contains(shed, info.FullMethodName) {
				m.shed(listenerGRPC, shedChecks)
				return ctx, refused
			}
			// health, reflection, others: never shed
		}
		if isStreamMethod(info.FullMethodName) {
			ctx = withStreamCancel(ctx)
		}
		return ctx, nil
	}
}

// Serve accepts connections on lis until Stop or GracefulStop; it then
// returns nil, and a non-nil error if lis failed.
func (s *GRPCServer) Serve(lis net.Listener) error { return s.srv.Serve(lis) }

// SetServing sets the health status of the server and of its services:
// SERVING or NOT_SERVING. After GracefulStop or Stop it has no effect.
func (s *GRPCServer) SetServing(serving bool) {
	st := healthgrpc.HealthCheckResponse_NOT_SERVING
	if serving {
		st = healthgrpc.HealthCheckResponse_SERVING
	}
	for _, name := range s.services {
		s.health.SetServingStatus(name, st)
	}
}

// GracefulStop reports NOT_SERVING, ends health watches, stops accepting
// connections and returns once every accepted RPC has been answered. Open
// streams of the stream methods answer the batch they hold and end; a
// batch that reaches one afterwards is not decided (streamserver.go).
func (s *GRPCServer) GracefulStop() {
	s.health.Shutdown()
	s.stopWatches()
	s.streams.stop()
	s.srv.GracefulStop()
}

// Stop closes every connection at once; RPCs in flight fail with Unavailable.
func (s *GRPCServer) Stop() {
	s.health.Shutdown()
	s.stopWatches()
	s.srv.Stop()
}

// healthServer is the standard health service whose Watch streams also end
// when the server stops.
type healthServer struct {
	*health.Server
	stop context.Context
}

func (h *healthServer) Watch(in *healthgrpc.HealthCheckRequest, stream healthgrpc.Health_WatchServer) error {
	ctx, cancel := context.WithCancel(stream.Context())
	defer cancel()
	defer context.AfterFunc(h.stop, cancel)()
	return h.Server.Watch(in, watchStream{Health_WatchServer: stream, ctx: ctx})
}

type watchStream struct {
	healthgrpc.Health_WatchServer
	ctx context.Context
}

func (w watchStream) Context() context.Context { return w.ctx }
