package server

import (
	"context"
	"net"
	"runtime"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthgrpc "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/tap"

	"github.com/shardlimiter/shardlimiter/transport"
)

// Config configures a Listener.
type Config struct {
	// MaxBatch bounds the items of one call of a checks service
	// (RegisterChecks); a larger batch fails the whole call with
	// InvalidArgument. Zero means transport.DefaultMaxBatch (1000). Larger
	// batches amortize more per-call cost but hold more memory per call.
	MaxBatch int
	// Metrics records every call; nil records nothing.
	Metrics *Metrics
	// InFlight bounds the work in progress of every service registered
	// with units (RegisterChecks, and Register with [Shed]): the checks of
	// a batch, the keys of a state push. A call that does not fit is
	// refused at once with ResourceExhausted and a retry delay (see
	// [InFlight]), never queued. On a client listener with a fair bound
	// (NewFairInFlight), the checks services' calls are charged at their
	// headers and connections share the bound fairly (fair.go). Nil means
	// no bound. Give the client and the peer listener bounds of their own,
	// so that a flood of client calls cannot starve the owners' forwarded
	// traffic; the HTTP API may share the client's.
	InFlight *InFlight
	// ServerOptions are passed to grpc.NewServer (credentials, keepalive,
	// interceptors, message size limits). A codec option has no effect: the
	// server uses transport's, which speaks standard proto (see
	// transport/codec.go); unary interceptors of the checks services see
	// the request as decoded by it.
	ServerOptions []grpc.ServerOption
}

// Listener is one gRPC port of a node and the services registered on it,
// with grpc.health.v1.Health and server reflection. A node runs two: the
// client listener (NewClientListener) and the peer listener
// (NewPeerListener). It knows no API by name: each API package registers
// its services with Register or RegisterChecks, before Serve. Health
// reports NOT_SERVING until SetServing(true). Its methods are safe for
// concurrent use; Register and RegisterChecks must all happen before
// Serve.
type Listener struct {
	cfg      Config
	name     int // listenerGRPC or listenerPeer: which sheds it counts
	srv      *grpc.Server
	health   *health.Server
	services []string // registered, as health reports them
	// methods is what the tap knows of each registered method that is
	// refused or charged at its headers; written by Register before Serve,
	// read by the tap.
	methods map[string]admission
	// stopping is done when the listener stops: streams of the APIs
	// (health Watch, Cluster's WatchMembers) end with it, as they would
	// otherwise keep GracefulStop waiting for as long as a client watches.
	stopping    context.Context
	stopWatches context.CancelFunc
	// streams are the open streams of the checks services' stream methods,
	// which stop before GracefulStop for the same reason (streamserver.go).
	streams *streamSet
}

// admission is how the tap treats a method at its headers.
type admission uint8

const (
	admitShed   admission = 1 << iota // refused while the bound is full
	admitFair                         // charged its connection's estimate on a fair bound
	admitStream                       // a checks stream: its context is made cancelable
)

// NewClientListener builds the listener of clients; it starts nothing
// until Serve. Its refusals count as the grpc listener's.
func NewClientListener(cfg Config) *Listener { return newListener(cfg, listenerGRPC) }

// NewPeerListener builds the listener of other nodes (--peer-addr); it
// starts nothing until Serve. Its refusals count as the peer listener's.
func NewPeerListener(cfg Config) *Listener { return newListener(cfg, listenerPeer) }

func newListener(cfg Config, name int) *Listener {
	if cfg.MaxBatch <= 0 {
		cfg.MaxBatch = transport.DefaultMaxBatch
	}
	stopping, stopWatches := context.WithCancel(context.Background())
	l := &Listener{
		cfg:         cfg,
		name:        name,
		health:      health.NewServer(),
		services:    []string{""},
		methods:     map[string]admission{},
		stopping:    stopping,
		stopWatches: stopWatches,
		streams:     newStreamSet(),
	}
	l.srv = grpc.NewServer(l.serverOptions()...)
	healthgrpc.RegisterHealthServer(l.srv, &healthServer{Server: l.health, stop: stopping})
	reflection.Register(l.srv)
	l.SetServing(false)
	return l
}

// RegisterOption says how the listener admits a registered service's calls.
type RegisterOption func(l *Listener, service string)

// Shed makes the listener refuse the named methods (short names, "Push")
// at their headers while its bound is full, counted as this listener's
// sheds. Their handlers still take their units themselves ([BoundChecker],
// [InFlight.AcquireChecks]). Other methods are never refused by the
// listener.
func Shed(methods ...string) RegisterOption {
	return func(l *Listener, service string) {
		for _, m := range methods {
			l.methods["/"+service+"/"+m] |= admitShed
		}
	}
}

// Register registers an API's service on the listener, as
// grpc.Server.RegisterService does, and reports it in health (NOT_SERVING
// until the next SetServing(true)). The service
// speaks standard proto through transport's codec, or messages that
// encode themselves (transport.Encoder, transport.Decoder).
func (l *Listener) Register(desc *grpc.ServiceDesc, impl any, opts ...RegisterOption) {
	l.srv.RegisterService(desc, impl)
	l.services = append(l.services, desc.ServiceName)
	for _, o := range opts {
		o(l, desc.ServiceName)
	}
	l.health.SetServingStatus(desc.ServiceName, healthgrpc.HealthCheckResponse_NOT_SERVING)
}

// Bound returns the listener's in-flight bound (nil: none).
func (l *Listener) Bound() *InFlight { return l.cfg.InFlight }

// Metrics returns the listener's metrics (nil: none).
func (l *Listener) Metrics() *Metrics { return l.cfg.Metrics }

// MaxBatch returns the bound on items per call.
func (l *Listener) MaxBatch() int { return l.cfg.MaxBatch }

// Stopping is done once the listener stops: a long-lived stream of an API
// ends with it.
func (l *Listener) Stopping() context.Context { return l.stopping }

// shed counts a refusal of a call of this listener.
func (l *Listener) shed() { l.cfg.Metrics.shed(l.name, shedChecks) }

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
// Static flow-control windows: see transport.FlowWindow.
func (l *Listener) serverOptions() []grpc.ServerOption {
	opts := []grpc.ServerOption{
		grpc.NumStreamWorkers(uint32(streamWorkers())),
		grpc.StaticStreamWindowSize(transport.FlowWindow),
		grpc.StaticConnWindowSize(transport.FlowWindow),
	}
	opts = append(opts, l.cfg.ServerOptions...)
	opts = append(opts, grpc.InTapHandle(l.tap))
	return append(opts, grpc.ForceServerCodecV2(transport.Codec))
}

// streamWorkers is the number of gRPC stream workers of a server: two per
// CPU the runtime may use, so that calls waiting on a forward do not
// leave the CPUs without a worker.
func streamWorkers() int { return 2 * runtime.GOMAXPROCS(0) }

// tap is the listener's tap. A checks stream's context is made cancelable
// (withStreamCancel). With a fair bound (NewFairInFlight), a call of a
// checks service is charged its connection's estimate at its headers and
// refused there when that does not fit its share (fair.go); the handler
// settles the charge once the message is decoded. With another bound, a
// call of the bounded methods (RegisterChecks, [Shed]) is refused at its
// headers while the bound is full: no call of one check or more could be
// admitted, and refusing before the message arrives spares its transfer
// and decoding — under a flood that is most of the cost of a refusal, as
// the messages of many calls share one connection. A call that arrives
// while there is room is admitted or refused on its item count once its
// message is in (see checkBatch.Decode). A stream is refused at its
// opening only: each batch it carries is admitted on its item count as a
// unary call's. The tap runs on the connection's reader with its lock
// held: one map lookup and one atomic load while there is room.
func (l *Listener) tap(ctx context.Context, info *tap.Info) (context.Context, error) {
	how := l.methods[info.FullMethodName]
	b := l.cfg.InFlight
	if b != nil && b.fair != nil && how&admitFair != 0 {
		var ok bool
		if ctx, ok = b.reserveConn(ctx); !ok {
			l.shed()
			return ctx, errRefused
		}
	} else if how&(admitShed|admitFair) != 0 && b.full() {
		l.shed()
		return ctx, errRefused
	}
	if how&admitStream != 0 {
		ctx = withStreamCancel(ctx)
	}
	return ctx, nil
}

// errRefused is the tap's refusal for overload.
var errRefused = transport.GRPCError(errShed)

// Serve accepts connections on lis until Stop or GracefulStop; it then
// returns nil, and a non-nil error if lis failed.
func (l *Listener) Serve(lis net.Listener) error { return l.srv.Serve(lis) }

// SetServing sets the health status of the server and of its services:
// SERVING or NOT_SERVING. After GracefulStop or Stop it has no effect.
func (l *Listener) SetServing(serving bool) {
	st := healthgrpc.HealthCheckResponse_NOT_SERVING
	if serving {
		st = healthgrpc.HealthCheckResponse_SERVING
	}
	for _, name := range l.services {
		l.health.SetServingStatus(name, st)
	}
}

// GracefulStop reports NOT_SERVING, ends health watches, stops accepting
// connections and returns once every accepted RPC has been answered. Open
// streams of the stream methods answer the batch they hold and end; a
// batch that reaches one afterwards is not decided (streamserver.go).
func (l *Listener) GracefulStop() {
	l.health.Shutdown()
	l.stopWatches()
	l.streams.stop()
	l.srv.GracefulStop()
}

// Stop closes every connection at once; RPCs in flight fail with Unavailable.
func (l *Listener) Stop() {
	l.health.Shutdown()
	l.stopWatches()
	l.srv.Stop()
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

// Acquire takes units of the listener's bound for a call of a service
// registered with [Shed] (one per key of a state push, say), or refuses it
// at once with an error wrapping transport.ErrOverloaded, counted as this
// listener's shed. Release what it returns once the call is done.
func (l *Listener) Acquire(units int) (Held, error) {
	u, err := l.cfg.InFlight.acquireChecks(units, l.cfg.Metrics, l.name)
	return Held{l.cfg.InFlight, u}, err
}

// Held is units taken of a bound (Listener.Acquire, HTTP.Acquire).
type Held struct {
	b     *InFlight
	units int64
}

// Release gives the units back; the zero Held gives nothing.
func (h Held) Release() {
	if h.units != 0 {
		h.b.Release(h.units)
	}
}

// RegisterService is Register without options, so that a Listener is a
// grpc.ServiceRegistrar for the generated Register…Server functions.
func (l *Listener) RegisterService(desc *grpc.ServiceDesc, impl any) { l.Register(desc, impl) }
