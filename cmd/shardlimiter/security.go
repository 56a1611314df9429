package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/shardlimiter/shardlimiter/gossip"
	"github.com/shardlimiter/shardlimiter/internal/certs"
	"github.com/shardlimiter/shardlimiter/internal/filewatch"
	tserver "github.com/shardlimiter/shardlimiter/transport/server"
)

// reloadEvery is how often the key and certificate files are compared with
// what is loaded. Kubernetes propagates a Secret update within about a
// minute; a second more is nothing, and reading a few small files a second
// costs nothing either.
const reloadEvery = time.Second

// security holds this node's keys and certificates, reloads them when their
// files change or on SIGHUP, and counts what it refuses.
type security struct {
	log       *slog.Logger
	gossipKey string       // file; "" = plaintext gossip
	client    *certs.Store // nil: client listeners in plaintext
	clientCA  bool         // client certificates required
	peer      *certs.Store // nil: peer RPCs in plaintext
	keys      [][]byte     // gossip keys at start
	keyFile   []byte       // the gossip key file as last loaded
	members   *gossip.Membership

	refused      *prometheus.CounterVec // listener, reason
	reloadErrors *prometheus.CounterVec // file kind
	reloads      *prometheus.CounterVec // file kind
}

// File kinds, as the reload metrics label them.
const (
	kindGossipKeys = "gossip_keys"
	kindClientTLS  = "client_tls"
	kindPeerTLS    = "peer_tls"
)

// loadSecurity reads every key and certificate file named by cfg; any
// problem is an error at start, never a silent downgrade to plaintext.
func loadSecurity(cfg config, log *slog.Logger, reg prometheus.Registerer) (*security, error) {
	s := &security{log: log, gossipKey: cfg.gossipKeyFile}
	var err error
	if s.gossipKey != "" {
		if s.keys, s.keyFile, err = readGossipKeys(s.gossipKey); err != nil {
			return nil, err
		}
	}
	if f := cfg.clientTLS; f.cert != "" {
		if s.client, err = certs.Load(certs.Files{Cert: f.cert, Key: f.key, CA: f.ca}); err != nil {
			return nil, fmt.Errorf("client TLS: %w", err)
		}
		s.clientCA = f.ca != ""
	}
	if f := cfg.peerTLS; f.cert != "" {
		if s.peer, err = certs.Load(certs.Files{Cert: f.cert, Key: f.key, CA: f.ca}); err != nil {
			return nil, fmt.Errorf("peer TLS: %w", err)
		}
	}
	s.refused = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "shardlimiter", Subsystem: "tls", Name: "refused_total",
		Help: "Connections refused in the TLS handshake, by listener (grpc, peer, http) and reason (plaintext, no_certificate, bad_certificate, other).",
	}, []string{"listener", "reason"})
	s.reloads = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "shardlimiter", Subsystem: "security", Name: "reloads_total",
		Help: "Key and certificate files loaded again after they changed, by kind (gossip_keys, client_tls, peer_tls).",
	}, []string{"kind"})
	s.reloadErrors = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "shardlimiter", Subsystem: "security", Name: "reload_errors_total",
		Help: "Changed key and certificate files that could not be loaded (the previous ones stay in use), by kind.",
	}, []string{"kind"})
	reg.MustRegister(s.refused, s.reloads, s.reloadErrors)
	for _, l := range []string{tserver.ListenerGRPC, tserver.ListenerPeer, tserver.ListenerHTTP} {
		for _, r := range []string{tserver.RefusedPlaintext, tserver.RefusedNoCertificate, tserver.RefusedBadCert, tserver.RefusedOther} {
			s.refused.WithLabelValues(l, r)
		}
	}
	for _, k := range []string{kindGossipKeys, kindClientTLS, kindPeerTLS} {
		s.reloads.WithLabelValues(k)
		s.reloadErrors.WithLabelValues(k)
	}
	s.registerExpiry(reg)
	return s, nil
}

// registerExpiry exports when each certificate in use expires.
func (s *security) registerExpiry(reg prometheus.Registerer) {
	for kind, st := range map[string]*certs.Store{kindClientTLS: s.client, kindPeerTLS: s.peer} {
		if st == nil {
			continue
		}
		reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: "shardlimiter", Subsystem: "security", Name: "certificate_expiry_timestamp_seconds",
			Help:        "When the certificate in use expires, Unix seconds; alert well before it.",
			ConstLabels: prometheus.Labels{"kind": kind},
		}, func() float64 { return float64(st.NotAfter().Unix()) }))
	}
}

// readGossipKeys reads and parses the gossip key file; file is its content.
func readGossipKeys(path string) (keys [][]byte, file []byte, err error) {
	file, err = os.ReadFile(path)
	if err != nil {
		return nil, nil, fmt.Errorf("--gossip-key-file: %w", err)
	}
	if keys, err = gossip.ParseKeys(file); err != nil {
		return nil, nil, fmt.Errorf("--gossip-key-file %s: %w", path, err)
	}
	return keys, file, nil
}

// refusal logs and counts one refused TLS handshake.
func (s *security) refusal(listener, remote, reason string, err error) {
	s.refused.WithLabelValues(listener, reason).Inc()
	s.log.Warn("TLS handshake refused", "listener", listener, "remote", remote, "reason", reason, "err", err)
}

// serverTLS is the tls.Config of a client-facing listener, nil without TLS.
func (s *security) serverTLS(nextProtos ...string) *tls.Config {
	if s.client == nil {
		return nil
	}
	return s.client.ServerConfig(s.clientCA, nextProtos...)
}

// warn says at start what is not protected, once.
func (s *security) warn() {
	if s.peer == nil {
		s.log.Warn("peer RPCs are not authenticated: anyone who can reach --peer-addr can act as a peer; set --peer-tls-cert-file, --peer-tls-key-file and --peer-tls-ca-file outside development")
	}
	if s.gossipKey == "" {
		s.log.Warn("gossip is not encrypted: anyone who can reach --gossip-addr can join the cluster; set --gossip-key-file outside development")
	}
}

// files lists every file to watch.
func (s *security) files(cfg config) []string {
	var out []string
	for _, f := range []string{cfg.gossipKeyFile, cfg.clientTLS.cert, cfg.clientTLS.key, cfg.clientTLS.ca,
		cfg.peerTLS.cert, cfg.peerTLS.key, cfg.peerTLS.ca} {
		if f != "" {
			out = append(out, f)
		}
	}
	return out
}

// run reloads every file when one changes or on SIGHUP, until ctx is done.
func (s *security) run(ctx context.Context, cfg config) {
	files := s.files(cfg)
	if len(files) == 0 {
		return
	}
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	changed := make(chan struct{}, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		filewatch.Watch(ctx, reloadEvery, files, func() {
			select {
			case changed <- struct{}{}:
			default:
			}
		})
	}()
	defer func() { <-done }()
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
			s.log.Info("SIGHUP: reloading keys and certificates")
		case <-changed:
		}
		s.reload()
	}
}

// reload loads every file again; what fails keeps its previous content.
func (s *security) reload() {
	if s.gossipKey != "" && s.members != nil {
		keys, file, err := readGossipKeys(s.gossipKey)
		changed := err == nil && !bytes.Equal(file, s.keyFile)
		if changed {
			if err = s.members.SetKeys(keys); err == nil {
				s.keyFile = file
			}
		}
		s.done(kindGossipKeys, changed, err)
	}
	for kind, st := range map[string]*certs.Store{kindClientTLS: s.client, kindPeerTLS: s.peer} {
		if st != nil {
			changed, err := st.Reload()
			s.done(kind, changed, err)
		}
	}
}

func (s *security) done(kind string, changed bool, err error) {
	switch {
	case err != nil:
		s.reloadErrors.WithLabelValues(kind).Inc()
		s.log.Error("reload failed; the previous keys and certificates stay in use", "kind", kind, "err", err)
	case changed:
		s.reloads.WithLabelValues(kind).Inc()
		s.log.Info("reloaded", "kind", kind)
	}
}
