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

	"github.com/shardlimiter/shardlimiter/gossip"
	"github.com/shardlimiter/shardlimiter/peer"
	"github.com/shardlimiter/shardlimiter/transport"
)

// The node sees membership through peer.Gossip, which gossip provides.
var _ peer.Gossip = (*gossip.Membership)(nil)

// server is one running node: its listeners, gossip, node and API servers.
type server struct {
	cfg      config
	log      *slog.Logger
	httpLis  net.Listener
	grpcLis  net.Listener
	gossip   *gossip.Membership
	node     *peer.Node
	grpc     *transport.GRPCServer
	http     *http.Server
	grpcAddr string // advertised
}

// newServer binds the HTTP and gRPC listeners and builds everything; the
// gossip sockets are bound when the node runs.
func newServer(cfg config, log *slog.Logger) (s *server, err error) {
	s = &server{cfg: cfg, log: log}
	if s.grpcLis, err = net.Listen("tcp", cfg.grpcAddr); err != nil {
		return nil, fmt.Errorf("grpc listener: %w", err)
	}
	defer func() {
		if err != nil {
			s.grpcLis.Close()
		}
	}()
	if s.httpLis, err = net.Listen("tcp", cfg.httpAddr); err != nil {
		return nil, fmt.Errorf("http listener: %w", err)
	}
	defer func() {
		if err != nil {
			s.httpLis.Close()
		}
	}()

	host := advertiseHost(cfg)
	grpcPort := s.grpcLis.Addr().(*net.TCPAddr).Port
	s.grpcAddr = net.JoinHostPort(host, strconv.Itoa(grpcPort))
	name := cfg.nodeName
	if name == "" {
		_, gp, _ := net.SplitHostPort(cfg.gossipAddr)
		port, _ := strconv.Atoi(gp)
		if port == 0 {
			port = grpcPort // :0 gossip: the gRPC port keeps names unique per host
		}
		name = defaultNodeName(host, port)
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	tm := transport.NewMetrics(reg)

	s.gossip, err = gossip.New(gossip.Config{
		NodeName:      name,
		BindAddr:      cfg.gossipAddr,
		AdvertiseAddr: cfg.advertiseAddr,
		GRPCAddr:      s.grpcAddr,
		Seeds:         cfg.join,
		Logger:        log.With("component", "gossip"),
	})
	if err != nil {
		return nil, err
	}
	s.node, err = peer.New(peer.Config{
		Name:                name,
		GRPCAddr:            s.grpcAddr,
		Gossip:              s.gossip,
		MaxKeys:             cfg.maxKeys,
		FailPolicy:          cfg.failPolicy,
		Peer:                transport.PeerConfig{Timeout: cfg.peerTimeout, Metrics: tm},
		ReplicationInterval: cfg.replication,
		HandoffTimeout:      cfg.handoff,
		Registerer:          reg,
		Logger:              log,
	})
	if err != nil {
		return nil, err
	}
	s.grpc = transport.NewGRPCServer(transport.GRPCConfig{
		Checker:  s.node,
		Local:    transport.CheckerFunc(s.node.CheckLocal),
		State:    s.node,
		MaxBatch: cfg.maxBatch,
		Metrics:  tm,
	})
	var handler http.Handler = transport.NewHTTPHandler(transport.HTTPConfig{
		Checker:   s.node,
		MaxBatch:  cfg.maxBatch,
		Ready:     s.node.Ready,
		Cluster:   func() any { return s.node.Cluster() },
		Metrics:   promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}),
		Telemetry: tm,
	})
	if cfg.pprof {
		handler = withPprof(handler)
	}
	s.http = &http.Server{
		Handler:           handler,
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	return s, nil
}

// serve runs until ctx is done, then shuts down gracefully:
//
//  1. hand this node's keys to their new owners and leave the gossip group
//     (readyz → 503), waiting up to --handoff-timeout for the new owners
//     to acknowledge;
//  2. keep answering for --shutdown-grace while peers and load balancers
//     stop sending here (skipped when there is nobody to re-route to);
//  3. stop the listeners, answering every request already accepted;
//  4. stop gossip, the sweeper and the peer clients.
func (s *server) serve(ctx context.Context, stdout io.Writer) error {
	nodeCtx, stopNode := context.WithCancel(context.Background())
	defer stopNode()
	var wg sync.WaitGroup
	errc := make(chan error, 3)
	wg.Go(func() {
		if err := s.node.Run(nodeCtx); err != nil {
			errc <- fmt.Errorf("node: %w", err)
		}
	})
	wg.Go(func() {
		if err := s.grpc.Serve(s.grpcLis); err != nil {
			errc <- fmt.Errorf("grpc: %w", err)
		}
	})
	wg.Go(func() {
		if err := s.http.Serve(s.httpLis); err != nil && !errors.Is(err, http.ErrServerClosed) {
			errc <- fmt.Errorf("http: %w", err)
		}
	})
	healthCtx, stopHealth := context.WithCancel(context.Background())
	healthDone := make(chan struct{})
	go func() { defer close(healthDone); s.followReadiness(healthCtx) }()
	s.log.Info("serving", "node", s.node.Name(), "http", s.httpLis.Addr().String(),
		"grpc", s.grpcLis.Addr().String(), "advertise", s.grpcAddr, "join", s.cfg.join)
	fmt.Fprintf(stdout, "serving node=%s http=%s grpc=%s\n", s.node.Name(), s.httpLis.Addr(), s.grpcLis.Addr())

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
		s.log.Info("draining", "grace", s.cfg.shutdownGrace)
		time.Sleep(s.cfg.shutdownGrace)
	}
	s.stopServers()
	stopNode()
	wg.Wait()
	s.log.Info("stopped")
	return runErr
}

// stopServers closes the listeners and waits for the requests in flight;
// past a deadline it cuts the remaining connections.
func (s *server) stopServers() {
	const deadline = 10 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := s.http.Shutdown(ctx); err != nil {
			s.log.Warn("http shutdown", "err", err)
			s.http.Close()
		}
	})
	wg.Go(func() {
		done := make(chan struct{})
		go func() { s.grpc.GracefulStop(); close(done) }()
		select {
		case <-done:
		case <-ctx.Done():
			s.grpc.Stop()
			<-done
		}
	})
	wg.Wait()
}

// withPprof serves the Go profiles under /debug/pprof/ and everything else
// with h.
func withPprof(h http.Handler) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	mux.Handle("/", h)
	return mux
}

// followReadiness keeps the gRPC health status equal to /readyz (joined,
// on its own ring, not leaving), so a gRPC readiness probe sends no traffic
// before the node has joined. It polls: readiness changes a few times in a
// node's life, and a 100 ms lag is harmless.
func (s *server) followReadiness(ctx context.Context) {
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	last := false
	s.grpc.SetServing(false)
	defer s.grpc.SetServing(false)
	for {
		if ready := s.node.Ready(); ready != last {
			s.grpc.SetServing(ready)
			last = ready
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
