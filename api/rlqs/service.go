// Package rlqs implements Envoy's Rate Limit Quota Service
// (envoy.service.rate_limit_quota.v3.RateLimitQuotaService) on the client
// listener, and the peer-port method shardlimiter.v1.Quota/Report by
// which the node that holds an Envoy stream reports to the owner of each
// quota bucket.
//
// The model: an Envoy instance opens one stream, names a domain and
// reports, every few seconds, what each of its buckets allowed and
// denied. Each report's bucket_id is matched against the domain's rlqs
// rules (package rules); a matched bucket is a key on the ring, and its
// owner keeps the demand of every instance that reports on it and hands
// each a max-min fair share of the limit as a token bucket with a TTL
// (package quota). The stream's node asks the owners (itself, or another
// node over the peer port, one hop) and pushes their answers down the
// stream. A bucket no rule matches gets the domain's default: ALLOW_ALL,
// DENY_ALL or no assignment.
//
// When the owner cannot be reached, the stream's node sends nothing for
// the bucket: Envoy keeps its last assignment until its TTL, then applies
// its expired_assignment_behavior. Before it answers an assignment, and
// every interval, an owner sends the bucket's state to the node that
// would own it if it left (replicate.go), so that a new owner after a
// crash counts every assignment still in use; a node learns what the
// instances hold of a bucket new to it for an interval, and until an
// assignment's life after its start (settled, quota.Report.LearnUntil).
//
// Concurrency: a Service is safe for concurrent use; each stream is
// served by its own goroutine (gRPC's), the owner's table has one mutex.
// Run sweeps the table and must run for the life of the node.
package rlqs

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"

	"github.com/shardlimiter/shardlimiter/quota"
	"github.com/shardlimiter/shardlimiter/rules"
	"github.com/shardlimiter/shardlimiter/transport/server"
)

// Defaults of Config.
const (
	DefaultMaxStreams          = 10_000
	DefaultMaxBuckets          = 1_000
	DefaultMaxEntries          = 16
	DefaultMaxEntryBytes       = 256
	DefaultMaxReportsPerSecond = 10
	DefaultPeerTimeout         = time.Second
)

// Router tells the owner of a bucket's key.
type Router interface {
	// Owner returns the peer address of the owner of key and whether the
	// owner is this node. It must not block.
	Owner(key string) (addr string, self bool)
	// Backup returns the peer address of the node that would own key if
	// this node left (where its buckets are replicated); ok is false when
	// there is none. It must not block.
	Backup(key string) (addr string, ok bool)
	// RingVersion changes whenever the ring may have moved a bucket: the
	// Service dates ownership changes by it (settled). It must not block.
	RingVersion() uint64
}

// Config configures a Service.
type Config struct {
	// Rules are the rules in force (their rlqs sections); nil or empty:
	// every bucket gets no assignment.
	Rules *rules.Store
	// Router routes buckets to their owners; nil: every bucket is owned
	// here (a single node).
	Router Router
	// Node is this node's name: the instances of its streams are named
	// after it, so that names are unique in the cluster.
	Node string
	// Interval is how often Envoy reports (about 5 s whatever its
	// configuration); zero means quota.DefaultInterval. The assignments'
	// TTL is two Intervals unless TTL is set.
	Interval time.Duration
	// TTL of the assignments, whole seconds; zero: two Intervals.
	TTL time.Duration
	// MaxStreams bounds the open streams of this node; zero means
	// DefaultMaxStreams. A stream beyond it is refused (ResourceExhausted).
	MaxStreams int
	// MaxBuckets bounds the buckets of one stream and the buckets of one
	// report; zero means DefaultMaxBuckets.
	MaxBuckets int
	// MaxEntries and MaxEntryBytes bound a bucket_id's entries and the
	// bytes of each key and value; zero means DefaultMaxEntries and
	// DefaultMaxEntryBytes. A bucket_id over them fails the stream
	// (InvalidArgument).
	MaxEntries, MaxEntryBytes int
	// MaxReportsPerSecond bounds the reports of one stream (a burst of
	// twice as many passes); zero means DefaultMaxReportsPerSecond. A
	// stream over it fails with ResourceExhausted.
	MaxReportsPerSecond float64
	// MaxOwnerBuckets bounds the buckets this node owns; zero means
	// quota.DefaultMaxBuckets. A new bucket beyond it gets the default.
	MaxOwnerBuckets int
	// DialOptions are used to reach other nodes' peer ports (their TLS).
	DialOptions []grpc.DialOption
	// PeerTimeout bounds a report to another node; zero means
	// DefaultPeerTimeout.
	PeerTimeout time.Duration
	// Registerer registers the metrics; nil registers none.
	Registerer prometheus.Registerer
	// Now is the clock; nil means time.Now. Tests set it.
	Now func() time.Time
}

// Service is the RLQS door and the owner's side of its buckets.
type Service struct {
	rlqspb.UnimplementedRateLimitQuotaServiceServer
	cfg     Config
	table   *quota.Table
	streams atomic.Int64
	seq     atomic.Uint64
	m       *metrics
	owners  owners
	stopped context.Context
	// ringSeen is the last ring version a report saw, ringChanged when it
	// (or the start) was first seen, Unix ns: see settled.
	ringSeen    atomic.Uint64
	ringChanged atomic.Int64
	// started is when the node started: until an assignment's life after
	// it, a bucket new here learns (quota.Report.LearnUntil).
	started time.Time
}

// settleMargin is added to an assignment's life when dating ownership
// changes: the time the members may disagree on the ring, during which
// the old owner may still hand out assignments.
const settleMargin = 2 * time.Second

// settled reports whether no ring change, nor this node's start, came
// within an assignment's life (TTL, Slack and settleMargin) before now:
// then a bucket new here cannot hold an assignment another owner handed
// out, and needs no learning (quota.Report.Settled).
func (s *Service) settled(now time.Time) bool {
	if r := s.cfg.Router; r != nil {
		if v := r.RingVersion(); s.ringSeen.Swap(v) != v {
			s.ringChanged.Store(now.UnixNano())
		}
	}
	return now.Sub(time.Unix(0, s.ringChanged.Load())) > s.table.TTL()+quota.Slack+settleMargin
}

// New returns a Service; it starts nothing (see Run).
func New(cfg Config) *Service {
	if cfg.Rules == nil {
		cfg.Rules = rules.NewStore(nil)
	}
	if cfg.Interval <= 0 {
		cfg.Interval = quota.DefaultInterval
	}
	for _, d := range []struct {
		p *int
		v int
	}{{&cfg.MaxStreams, DefaultMaxStreams}, {&cfg.MaxBuckets, DefaultMaxBuckets}, {&cfg.MaxEntries, DefaultMaxEntries}, {&cfg.MaxEntryBytes, DefaultMaxEntryBytes}} {
		if *d.p <= 0 {
			*d.p = d.v
		}
	}
	if cfg.MaxReportsPerSecond <= 0 {
		cfg.MaxReportsPerSecond = DefaultMaxReportsPerSecond
	}
	if cfg.PeerTimeout <= 0 {
		cfg.PeerTimeout = DefaultPeerTimeout
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	s := &Service{
		cfg:     cfg,
		table:   quota.New(quota.Config{Interval: cfg.Interval, TTL: cfg.TTL, MaxBuckets: cfg.MaxOwnerBuckets}),
		owners:  owners{opts: cfg.DialOptions, conns: map[string]*ownerConn{}},
		stopped: context.Background(),
	}
	s.started = cfg.Now()
	s.ringChanged.Store(s.started.UnixNano())
	s.m = newMetrics(s, cfg.Registerer)
	return s
}

// TTL returns the TTL of the assignments.
func (s *Service) TTL() time.Duration { return s.table.TTL() }

// Register registers the RLQS service on the client listener. Its streams
// end when the listener stops.
func (s *Service) Register(l *server.Listener) {
	s.stopped = l.Stopping()
	rlqspb.RegisterRateLimitQuotaServiceServer(l, s)
}

// RegisterPeer registers shardlimiter.v1.Quota/Report on the peer
// listener: the reports of the streams of other nodes for the buckets this
// node owns.
func (s *Service) RegisterPeer(l *server.Listener) {
	registerQuotaProto()
	l.Register(&quotaServiceDesc, s)
}

// Run sweeps the owner's table every Interval (abandoned buckets, silent
// instances), replicates it (replicate.go) and closes idle connections to
// other nodes, until ctx is done; then it closes every connection and
// returns nil.
func (s *Service) Run(ctx context.Context) error {
	t := time.NewTicker(s.cfg.Interval)
	defer t.Stop()
	defer s.owners.closeAll()
	for {
		select {
		case <-ctx.Done():
			return nil
		case now := <-t.C:
			s.m.abandoned.Add(float64(s.table.Sweep(now)))
			s.replicate(ctx, now)
			s.owners.closeIdle(now.Add(-10 * time.Minute))
		}
	}
}

// owners are the connections to other nodes' peer ports, by address.
type owners struct {
	opts  []grpc.DialOption
	mu    sync.Mutex
	conns map[string]*ownerConn // guarded by mu
}

type ownerConn struct {
	cc   *grpc.ClientConn
	used atomic.Int64 // Unix nanoseconds of the last call
}
