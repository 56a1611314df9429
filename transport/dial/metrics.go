package dial

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"

	"github.com/shardlimiter/shardlimiter/transport"
)

// Metrics holds the Prometheus collectors of a node's peer clients:
// forwarded checks, the batches and durations of their RPCs, and failures.
// A nil *Metrics is valid and records nothing. It is safe for concurrent
// use; share one between every PeerClient of a node.
type Metrics struct {
	forwarded    prometheus.Counter
	forwardBatch prometheus.Observer
	peerDuration prometheus.Observer
	peerErrors   [numPeerErrors]prometheus.Counter
}

const (
	peerErrTimeout = iota
	peerErrUnavailable
	peerErrClosed
	peerErrOther
	peerErrOverloaded
	numPeerErrors
)

var peerErrNames = [numPeerErrors]string{"timeout", "unavailable", "closed", "other", "overloaded"}

// NewMetrics creates the collectors and registers them with reg. A nil reg
// registers nothing (the collectors still count, for tests).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{}
	m.forwarded = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: "shardlimiter", Subsystem: "peer", Name: "forwarded_checks_total",
		Help: "Checks accepted for forwarding to their owner.",
	})
	forwardBatch := prometheus.NewHistogram(prometheus.HistogramOpts{
		Namespace: "shardlimiter", Subsystem: "peer", Name: "forward_batch_size_items",
		Help:    "Checks per ForwardRateLimits RPC sent.",
		Buckets: []float64{1, 2, 5, 10, 20, 50, 100, 200, 500, 1000},
	})
	peerDuration := prometheus.NewHistogram(prometheus.HistogramOpts{
		Namespace: "shardlimiter", Subsystem: "peer", Name: "rpc_duration_seconds",
		Help:    "Time of one ForwardRateLimits RPC, sent to its answer.",
		Buckets: prometheus.ExponentialBuckets(50e-6, 2.5, 12),
	})
	peerErrors := prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "shardlimiter", Subsystem: "peer", Name: "rpc_errors_total",
		Help: "Failed ForwardRateLimits RPCs, by reason (timeout, unavailable, closed, overloaded: the owner shed the call, other).",
	}, []string{"reason"})
	m.forwardBatch, m.peerDuration = forwardBatch, peerDuration
	for i, name := range peerErrNames {
		m.peerErrors[i] = peerErrors.WithLabelValues(name)
	}
	if reg != nil {
		reg.MustRegister(m.forwarded, forwardBatch, peerDuration, peerErrors)
	}
	return m
}

// forward records checks accepted by PeerClient.Forward.
func (m *Metrics) forward(items int) {
	if m == nil {
		return
	}
	m.forwarded.Add(float64(items))
}

// peerRPC records one ForwardRateLimits RPC; kind is a peerErr* index or -1.
func (m *Metrics) peerRPC(items int, d time.Duration, kind int) {
	if m == nil {
		return
	}
	m.forwardBatch.Observe(float64(items))
	m.peerDuration.Observe(d.Seconds())
	if kind >= 0 {
		m.peerErrors[kind].Inc()
	}
}

// peerKeepalive is the dial option of the node's peer and state clients.
func peerKeepalive() grpc.DialOption {
	return grpc.WithKeepaliveParams(keepalive.ClientParameters{
		Time: transport.PeerKeepaliveTime, Timeout: transport.PeerKeepaliveTimeout, PermitWithoutStream: true,
	})
}
