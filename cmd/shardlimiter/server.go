package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	gubapi "github.com/shardlimiter/shardlimiter/api/gubernator"
	"github.com/shardlimiter/shardlimiter/api/inspect"
	"github.com/shardlimiter/shardlimiter/api/native"
	"github.com/shardlimiter/shardlimiter/api/peers"
	"github.com/shardlimiter/shardlimiter/api/resp"
	"github.com/shardlimiter/shardlimiter/api/rlqs"
	"github.com/shardlimiter/shardlimiter/gossip"
	"github.com/shardlimiter/shardlimiter/peer"
	"github.com/shardlimiter/shardlimiter/statuspage"
	"github.com/shardlimiter/shardlimiter/transport"
	"github.com/shardlimiter/shardlimiter/transport/dial"
	tserver "github.com/shardlimiter/shardlimiter/transport/server"
)

// The node sees membership through peer.Gossip, which gossip provides.
var _ peer.Gossip = (*gossip.Membership)(nil)

// server is one running node: its listeners, gossip, node and API servers.
type server struct {
	cfg       config
	log       *slog.Logger
	sec       *security
	httpLis   net.Listener
	grpcLis   net.Listener
	peerLis   net.Listener
	healthLis net.Listener // nil without --health-addr
	gubLis    net.Listener // nil without --gubernator-http-addr
	respLis   net.Listener // nil without --resp-addr
	gossip    *gossip.Membership
	node      *peer.Node
	rls       *rlsServer        // rules and Envoy's rate-limit service (rls.go)
	rlqs      *rlqs.Service     // Envoy's quota service (rlqs.go)
	grpc      *tserver.Listener // client API
	peers     *tserver.Listener // peer RPCs
	http      *http.Server
	health    *http.Server // nil without --health-addr
	gubHTTP   *http.Server // gubernator's gateway; nil without --gubernator-http-addr
	resp      *resp.Server // the Redis protocol; nil without --resp-addr
	grpcAddr  string       // advertised
	peerAddr  string       // advertised
}

// newServer reads the keys and certificates, binds the HTTP, gRPC and peer
// listeners and builds everything; the gossip sockets are bound when the
// node runs.
func newServer(cfg config, log *slog.Logger) (s *server, err error) {
	s = &server{cfg: cfg, log: log}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if s.sec, err = loadSecurity(cfg, log, reg); err != nil {
		return nil, err
	}
	if err = s.bind(); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			s.closeListeners()
		}
	}()
	name := s.identify()
	b := newBounds(cfg, reg)
	if err = s.newGossip(name, reg); err != nil {
		return nil, err
	}
	if err = s.newNode(name, b, reg); err != nil {
		return nil, err
	}
	// Before anything serves: a check decided before the merge would be
	// counted from a fresh key.
	if err = s.node.Restore(); err != nil {
		return nil, err
	}
	if s.rls, err = newRLS(cfg.rls, s.node, b, reg, log); err != nil {
		return nil, err
	}
	s.newListeners(b, reg)
	if err = s.newRESP(b, reg); err != nil {
		return nil, err
	}
	return s, nil
}

// bind opens the listeners of the flags; on error none is left open. The
// health, gubernator-http and resp listeners are off without their flag.
func (s *server) bind() error {
	for _, l := range []struct {
		name, addr string
		optional   bool
		lis        *net.Listener
	}{
		{"grpc", s.cfg.grpcAddr, false, &s.grpcLis},
		{"peer", s.cfg.peerAddr, false, &s.peerLis},
		{"http", s.cfg.httpAddr, false, &s.httpLis},
		{"health", s.cfg.healthAddr, true, &s.healthLis},
		{"gubernator-http", s.cfg.gubHTTPAddr, true, &s.gubLis},
		{"resp", s.cfg.resp.addr, true, &s.respLis},
	} {
		if l.optional && l.addr == "" {
			continue
		}
		lis, err := net.Listen("tcp", l.addr)
		if err != nil {
			s.closeListeners()
			return fmt.Errorf("%s listener: %w", l.name, err)
		}
		*l.lis = lis
	}
	return nil
}

// closeListeners closes the listeners bind opened.
func (s *server) closeListeners() {
	for _, l := range []net.Listener{s.grpcLis, s.peerLis, s.httpLis, s.healthLis, s.gubLis, s.respLis} {
		if l != nil {
			l.Close()
		}
	}
}

// identify sets the advertised addresses and returns the node's name:
// --node-name, or one derived from the host and the gossip port (the gRPC
// port when gossip binds :0, which keeps names unique per host).
func (s *server) identify() string {
	host := advertiseHost(s.cfg)
	grpcPort := s.grpcLis.Addr().(*net.TCPAddr).Port
	s.grpcAddr = net.JoinHostPort(host, strconv.Itoa(grpcPort))
	s.peerAddr = net.JoinHostPort(host, strconv.Itoa(s.peerLis.Addr().(*net.TCPAddr).Port))
	if s.cfg.nodeName != "" {
		return s.cfg.nodeName
	}
	_, gp, _ := net.SplitHostPort(s.cfg.gossipAddr)
	port, _ := strconv.Atoi(gp)
	if port == 0 {
		port = grpcPort
	}
	return defaultNodeName(host, port)
}

// bounds are the node's in-flight bounds and the metrics of its listeners
// and peer clients.
type bounds struct {
	listeners          *tserver.Metrics
	peers              *dial.Metrics
	client, peer, body *tserver.InFlight
}

func newBounds(cfg config, reg prometheus.Registerer) bounds {
	b := bounds{
		listeners: tserver.NewMetrics(reg),
		peers:     dial.NewMetrics(reg),
		client:    tserver.NewFairInFlight(cfg.maxInflight),
		peer:      tserver.NewInFlight(cfg.maxPeerFlight),
		body:      tserver.NewInFlight(tserver.DefaultBodyBytes),
	}
	tserver.RegisterInFlight(reg, b.client, b.peer, b.body)
	return b
}

// newGossip builds the node's membership (its sockets open when it runs).
func (s *server) newGossip(name string, reg prometheus.Registerer) (err error) {
	s.gossip, err = gossip.New(gossip.Config{
		NodeName:      name,
		BindAddr:      s.cfg.gossipAddr,
		AdvertiseAddr: s.cfg.advertiseAddr,
		GRPCAddr:      s.grpcAddr,
		PeerAddr:      s.peerAddr,
		Seeds:         s.cfg.join,
		Keys:          s.sec.keys,
		ProbeInterval: s.cfg.probeInterval,
		Logger:        s.log.With("component", "gossip"),
	})
	if err != nil {
		return err
	}
	s.sec.members = s.gossip
	registerGossipMetrics(reg, s.gossip)
	return nil
}

// newNode builds the node, whose peer clients dial with the peer TLS.
func (s *server) newNode(name string, b bounds, reg prometheus.Registerer) (err error) {
	cfg := s.cfg
	peerCfg := dial.PeerConfig{Timeout: cfg.peerTimeout, MaxInFlight: cfg.peerInFlight, Metrics: b.peers}
	if s.sec.peer != nil {
		peerCfg.DialOptions = []grpc.DialOption{grpc.WithTransportCredentials(credentials.NewTLS(s.sec.peer.ClientConfig()))}
	}
	s.node, err = peer.New(peer.Config{
		Name:                name,
		GRPCAddr:            s.grpcAddr,
		PeerAddr:            s.peerAddr,
		Gossip:              s.gossip,
		MaxKeys:             cfg.maxKeys,
		MaxMemory:           cfg.maxMemory,
		FailPolicy:          cfg.failPolicy,
		Peer:                peerCfg,
		ReplicationInterval: cfg.replication,
		HandoffTimeout:      cfg.handoff,
		StateDir:            cfg.stateDir,
		SnapshotInterval:    cfg.snapshotEvery,
		SnapshotName:        cfg.snapshotName,
		MetricsMaxRules:     cfg.metricsMaxRules,
		Leases:              cfg.leases,
		LeaseThreshold:      cfg.leaseRate,
		Registerer:          reg,
		Logger:              s.log,
	})
	return err
}

// newListeners builds the client and peer gRPC listeners and the HTTP
// servers, and registers each API on them.
func (s *server) newListeners(b bounds, reg *prometheus.Registry) {
	cfg := s.cfg
	checker := s.rls.checker(s.node)
	inspector := ruleInspector{rules: s.rls.store, node: s.node}
	s.grpc = tserver.NewClientListener(tserver.Config{
		MaxBatch: cfg.maxBatch, Metrics: b.listeners, InFlight: b.client, ServerOptions: s.clientGRPCOptions(),
	})
	native.Register(s.grpc, checker, s.node) // the node tells clients the ring (package client)
	inspect.Register(s.grpc, inspector)
	s.registerClientLeases(s.grpc, reg)
	s.rls.svc.Register(s.grpc)
	s.rlqs = s.newRLQS(reg)
	s.rlqs.Register(s.grpc)
	gub := gubapi.Register(s.grpc, s.gubernatorConfig())
	s.peers = tserver.NewPeerListener(tserver.Config{
		MaxBatch: cfg.maxBatch, Metrics: b.listeners, InFlight: b.peer, ServerOptions: s.peerGRPCOptions(),
	})
	peers.Register(s.peers, transport.CheckerFunc(s.node.CheckLocal), s.node)
	s.rlqs.RegisterPeer(s.peers)

	h := tserver.NewHTTP(tserver.HTTPConfig{
		MaxBatch: cfg.maxBatch, Ready: s.node.Ready, Metrics: b.listeners, InFlight: b.client, BodyBytes: b.body,
	})
	native.RegisterHTTP(h, checker)
	inspect.RegisterHTTP(h, inspector)
	s.rls.svc.RegisterHTTP(h)
	h.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}), http.MethodGet, http.MethodHead)
	h.HandleView("/v1/cluster", func(*http.Request) any { return s.clusterPage() })
	h.HandleView("/v1/cluster/rings", func(r *http.Request) any { return s.node.Rings(r.Context()) })
	s.newHTTPServers(h, gub)
}

// clientGRPCOptions are the client listener's connection limits and TLS.
func (s *server) clientGRPCOptions() []grpc.ServerOption {
	opts := tserver.ConnLimits{
		MaxConnectionIdle: s.cfg.idleTimeout,
		MaxRecvMsgSize:    transport.MaxRequestBytes(s.cfg.maxBatch),
	}.ServerOptions()
	if tc := s.sec.serverTLS("h2"); tc != nil {
		opts = append(opts, grpc.Creds(tserver.ServerCredentials(tc, tserver.ListenerGRPC, s.sec.refusal)))
	}
	return opts
}

// peerGRPCOptions are the peer listener's connection limits and mTLS.
func (s *server) peerGRPCOptions() []grpc.ServerOption {
	opts := tserver.ConnLimits{
		MaxConnectionIdle:    tserver.PeerIdleTimeout,
		MaxConcurrentStreams: tserver.PeerMaxConcurrentStreams,
		MaxRecvMsgSize:       transport.MaxStateMessage, // State pushes; Peers batches are far smaller
	}.ServerOptions()
	if s.sec.peer != nil {
		opts = append(opts, grpc.Creds(tserver.ServerCredentials(
			s.sec.peer.ServerConfig(true, "h2"), tserver.ListenerPeer, s.sec.refusal)))
	}
	return opts
}

// newHTTPServers builds the HTTP API's server (with the status page at /
// and, with --pprof, the profiles), the probes' and gubernator's gateway,
// each under the client TLS when it is on.
func (s *server) newHTTPServers(h *tserver.HTTP, gub *gubapi.API) {
	handler := statuspage.Mount(h) // the status page at /
	if s.cfg.pprof {
		handler = withPprof(handler)
	}
	s.http = newHTTPServer(s.cfg, handler, s.log)
	if tc := s.sec.serverTLS("h2", "http/1.1"); tc != nil {
		s.httpLis = tserver.TLSListener(s.httpLis, tc, tserver.ListenerHTTP, s.sec.refusal)
	}
	if s.healthLis != nil {
		s.health = newHTTPServer(s.cfg, tserver.NewHealthHandler(s.node.Ready), s.log)
	}
	if s.gubLis != nil {
		s.gubHTTP = newHTTPServer(s.cfg, gub.Gateway(h), s.log)
		if tc := s.sec.serverTLS("h2", "http/1.1"); tc != nil {
			s.gubLis = tserver.TLSListener(s.gubLis, tc, tserver.ListenerGubernatorHTTP, s.sec.refusal)
		}
	}
}

// registerGossipMetrics exports the gossip refused for a key mismatch.
func registerGossipMetrics(reg prometheus.Registerer, m *gossip.Membership) {
	for _, reason := range gossip.RejectedReasons {
		reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
			Namespace: "shardlimiter", Subsystem: "gossip", Name: "rejected_total",
			Help:        "Gossip messages and streams from other nodes refused, by reason: wrong_key (no key held opens it), plaintext (this node requires encryption), encrypted (this node has no keys).",
			ConstLabels: prometheus.Labels{"reason": reason},
		}, func() float64 { return float64(m.Rejected(reason)) }))
	}
}

// drain keeps the node answering for --shutdown-grace, or until no other
// member is left: nobody re-routes to this node then (the whole cluster is
// stopping), and the node says so once. The others may have gone already,
// while this node handed its keys to them.
func (s *server) drain() {
	if !s.node.OthersAlive() {
		s.node.NoteNoneLeft()
		return
	}
	s.log.Info("draining", "grace", s.cfg.shutdownGrace)
	grace := time.NewTimer(s.cfg.shutdownGrace)
	defer grace.Stop()
	tick := time.NewTicker(drainPoll)
	defer tick.Stop()
	for {
		select {
		case <-grace.C:
			return
		case <-tick.C:
			if !s.node.OthersAlive() {
				s.node.NoteNoneLeft()
				return
			}
		}
	}
}

// drainPoll is how often a drain looks whether other members are left.
const drainPoll = 50 * time.Millisecond

// serve runs until ctx is done, then shuts down gracefully:
//
//  1. hand this node's keys to their new owners and leave the gossip group
//     (readyz → 503), waiting up to --handoff-timeout for the new owners
//     to acknowledge;
//  2. keep answering for --shutdown-grace while peers and load balancers
//     stop sending here (skipped, or cut short, when no other member is
//     left to re-route to);
//  3. stop the listeners, answering every request already accepted;
//  4. stop gossip, the sweeper and the peer clients, and write the last
//     snapshot (--state-dir).
func (s *server) serve(ctx context.Context, stdout io.Writer) error {
	nodeCtx, stopNode := context.WithCancel(context.Background())
	defer stopNode()
	var wg sync.WaitGroup
	errc := make(chan error, 6)
	wg.Go(func() {
		if err := s.node.Run(nodeCtx); err != nil {
			errc <- fmt.Errorf("node: %w", err)
		}
	})
	wg.Go(func() { s.sec.run(nodeCtx, s.cfg) })
	wg.Go(func() { s.rls.run(nodeCtx) })
	wg.Go(func() { _ = s.rlqs.Run(nodeCtx) })
	s.startListeners(&wg, errc)
	s.sec.warn()
	healthCtx, stopHealth := context.WithCancel(context.Background())
	healthDone := make(chan struct{})
	go func() { defer close(healthDone); s.followReadiness(healthCtx) }()
	s.log.Info("serving", "node", s.node.Name(), "http", s.httpLis.Addr().String(),
		"grpc", s.grpcLis.Addr().String(), "peer", s.peerLis.Addr().String(),
		"advertise", s.grpcAddr, "advertise_peer", s.peerAddr, "join", s.cfg.join,
		"client_tls", s.sec.client != nil, "client_certificates", s.sec.clientCA,
		"peer_tls", s.sec.peer != nil, "gossip_encrypted", s.gossip.Encrypted())
	s.printServing(stdout)

	var runErr error
	select {
	case <-ctx.Done():
		s.log.Info("shutting down: leaving the cluster")
	case runErr = <-errc:
		s.log.Error("shutting down after a failure", "err", runErr)
	}
	stopHealth()
	<-healthDone // health is NOT_SERVING from here on
	others := len(s.node.Cluster().Members) > 1
	if err := s.node.Leave(); err != nil {
		s.log.Warn("leave", "err", err)
	}
	if others && runErr == nil && s.cfg.shutdownGrace > 0 {
		s.drain()
	}
	s.stopServers()
	stopNode()
	wg.Wait()
	s.log.Info("stopped")
	return runErr
}

// startListeners serves every listener in a goroutine of wg; a listener
// that fails sends its error to errc.
func (s *server) startListeners(wg *sync.WaitGroup, errc chan<- error) {
	serve := func(name string, run func() error) {
		wg.Go(func() {
			if err := run(); err != nil && !errors.Is(err, http.ErrServerClosed) {
				errc <- fmt.Errorf("%s: %w", name, err)
			}
		})
	}
	serve("grpc", func() error { return s.grpc.Serve(s.grpcLis) })
	serve("peer", func() error { return s.peers.Serve(s.peerLis) })
	serve("http", func() error { return s.http.Serve(s.httpLis) })
	if s.health != nil {
		serve("health", func() error { return s.health.Serve(s.healthLis) })
	}
	if s.gubHTTP != nil {
		serve("gubernator-http", func() error { return s.gubHTTP.Serve(s.gubLis) })
	}
	if s.resp != nil {
		serve("resp", func() error { return s.resp.Serve(s.respLis) })
	}
}

// stopServers closes the listeners and waits for the requests in flight;
// past a deadline it cuts the remaining connections.
func (s *server) stopServers() {
	const deadline = 10 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	var wg sync.WaitGroup
	for _, h := range []*http.Server{s.http, s.health, s.gubHTTP} {
		if h == nil {
			continue
		}
		wg.Go(func() {
			if err := h.Shutdown(ctx); err != nil {
				s.log.Warn("http shutdown", "err", err)
				h.Close()
			}
		})
	}
	if s.resp != nil {
		wg.Go(func() { s.resp.Close() })
	}
	for _, g := range []*tserver.Listener{s.grpc, s.peers} {
		wg.Go(func() {
			done := make(chan struct{})
			go func() { g.GracefulStop(); close(done) }()
			select {
			case <-done:
			case <-ctx.Done():
				g.Stop()
				<-done
			}
		})
	}
	wg.Wait()
}

// withPprof serves the Go profiles under /debug/pprof/ and everything else
// with h.
func withPprof(h http.Handler) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", unbounded(pprof.Profile))
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", unbounded(pprof.Trace))
	mux.Handle("/", h)
	return mux
}

// unbounded lifts the HTTP write deadline for h: CPU profiles and traces
// take as long as the operator asks (?seconds=N), longer than the
// server's WriteTimeout.
func unbounded(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		_ = http.NewResponseController(w).SetWriteDeadline(time.Time{})
		h(w, r)
	}
}

// newHTTPServer returns an HTTP server of h with the node's connection
// limits: a deadline on the whole request (headers and body) and on the
// answer, an idle keep-alive timeout and a header size cap.
func newHTTPServer(cfg config, h http.Handler, log *slog.Logger) *http.Server {
	header, read, write, idle := httpTimeouts(cfg)
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: header,
		ReadTimeout:       read,
		WriteTimeout:      write,
		IdleTimeout:       idle,
		MaxHeaderBytes:    maxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
}

// followReadiness keeps the gRPC health status equal to /readyz (joined,
// on its own ring, not leaving), so a gRPC readiness probe sends no traffic
// before the node has joined. It wakes only when the node signals that
// readiness may have changed: an idle node runs no timer for it.
func (s *server) followReadiness(ctx context.Context) {
	last := false
	set := func(ready bool) {
		s.grpc.SetServing(ready)
		s.peers.SetServing(ready)
	}
	set(false)
	defer set(false)
	for {
		if ready := s.node.Ready(); ready != last {
			set(ready)
			last = ready
		}
		select {
		case <-ctx.Done():
			return
		case <-s.node.ReadyChanged():
		}
	}
}

// printServing writes the one stdout line that says every listener is up,
// with the bound addresses (tools that start nodes on port 0 read it): in
// the log format, so that --log-format json keeps stdout JSON.
func (s *server) printServing(stdout io.Writer) {
	addrs := []any{"node", s.node.Name(), "http", s.httpLis.Addr().String(), "grpc", s.grpcLis.Addr().String(), "peer", s.peerLis.Addr().String()}
	if s.healthLis != nil {
		addrs = append(addrs, "health", s.healthLis.Addr().String())
	}
	if s.gubLis != nil {
		addrs = append(addrs, "gubernator_http", s.gubLis.Addr().String())
	}
	if s.respLis != nil {
		addrs = append(addrs, "resp", s.respAddr())
	}
	if s.cfg.logFormat == "json" {
		slog.New(slog.NewJSONHandler(stdout, &slog.HandlerOptions{ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == slog.LevelKey {
				return slog.Attr{} // not a log record: the line other tools read
			}
			return a
		}})).Info("serving", addrs...)
		return
	}
	line := "serving"
	for i := 0; i < len(addrs); i += 2 {
		line += fmt.Sprintf(" %s=%s", addrs[i], addrs[i+1])
	}
	fmt.Fprintln(stdout, line)
}
