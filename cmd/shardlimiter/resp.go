package main

import (
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/shardlimiter/shardlimiter/api/resp"
	"github.com/shardlimiter/shardlimiter/peer"
	tserver "github.com/shardlimiter/shardlimiter/transport/server"
)

// respConfig is the Redis protocol's listener (docs/REDIS.md).
type respConfig struct {
	addr         string // empty: off
	passwordFile string // empty: no AUTH
	maxConns     int
	idleTimeout  time.Duration
}

// respPassword reads --resp-password-file: its first line, without the
// line break an editor adds.
func respPassword(file string) (string, error) {
	if file == "" {
		return "", nil
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return "", fmt.Errorf("--resp-password-file: %w", err)
	}
	pw, _, _ := strings.Cut(string(b), "\n")
	pw = strings.TrimSuffix(pw, "\r")
	if pw == "" {
		return "", fmt.Errorf("--resp-password-file: %s holds no password", file)
	}
	return pw, nil
}

// newRESP builds the Redis protocol's server when --resp-addr is set:
// CL.THROTTLE goes to the node, SL.CHECK through the rules by name; each
// connection shares the client bound fairly; under the client TLS.
func (s *server) newRESP(b bounds, reg prometheus.Registerer) error {
	if s.respLis == nil {
		return nil
	}
	pw, err := respPassword(s.cfg.resp.passwordFile)
	if err != nil {
		return err
	}
	authFailed := prometheus.NewCounter(prometheus.CounterOpts{Namespace: "shardlimiter", Subsystem: "resp", Name: "auth_failures_total",
		Help: "Redis-protocol AUTH (or HELLO AUTH) refused: wrong password or user."})
	refused := prometheus.NewCounter(prometheus.CounterOpts{Namespace: "shardlimiter", Subsystem: "resp", Name: "connections_refused_total",
		Help: "Redis-protocol connections closed at accept: --resp-max-conns were open."})
	var lastLog atomic.Int64
	s.resp = resp.New(resp.Config{
		Checker: s.node, Rules: s.rls.checker(s.node), InFlight: b.client, Metrics: b.listeners, Password: pw,
		Info: func() resp.Info {
			return resp.Info{Version: version, Node: s.node.Name(), Members: len(s.node.Cluster().Members)}
		},
		OnAuthFailure: func(remote string) {
			authFailed.Inc()
			// At most one line a second: a password guesser must not flood the log.
			now := time.Now().UnixNano()
			if last := lastLog.Load(); now-last >= int64(time.Second) && lastLog.CompareAndSwap(last, now) {
				s.log.Warn("resp: AUTH refused", "remote", remote, "refused_total", "shardlimiter_resp_auth_failures_total")
			}
		},
		OnConnRefused: func(string) { refused.Inc() },
		Limits:        resp.Limits{MaxConns: s.cfg.resp.maxConns, MaxBatch: s.cfg.maxBatch, IdleTimeout: s.cfg.resp.idleTimeout},
	})
	open := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "shardlimiter", Subsystem: "resp", Name: "connections",
		Help: "Redis-protocol connections open now."}, func() float64 { return float64(s.resp.Conns()) })
	reg.MustRegister(authFailed, refused, open)
	if tc := s.sec.serverTLS(); tc != nil {
		s.respLis = tserver.TLSListener(s.respLis, tc, tserver.ListenerRESP, s.sec.refusal)
	}
	return nil
}

// respAddr is the Redis listener's address for the serving line, "" when off.
func (s *server) respAddr() string {
	if s.respLis == nil {
		return ""
	}
	return s.respLis.Addr().String()
}

// clusterPage is GET /v1/cluster: the node's view, and the Redis
// listener's address when it is on (the status page lists the ports).
type clusterPage struct {
	peer.ClusterInfo
	RESPAddr string `json:"resp_addr,omitempty"`
}

func (s *server) clusterPage() clusterPage {
	return clusterPage{ClusterInfo: s.node.Cluster(), RESPAddr: s.respAddr()}
}
