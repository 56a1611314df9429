package client

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/shardlimiter/shardlimiter/transport"
	"github.com/shardlimiter/shardlimiter/transport/dial"
)

// Config configures a Client. Only Targets is required.
type Config struct {
	// Targets are addresses of the cluster's client gRPC API (host:port, a
	// DNS name such as a Kubernetes Service, or any gRPC target). The
	// client watches the ring through them and sends checks to them while
	// it has no ring. Required.
	Targets []string
	// TLS secures every connection (targets and the members found
	// through them); nil means plaintext. Members are dialed at the
	// address they advertise, so their certificates must be valid for it
	// (an IP SAN) unless ServerName is set.
	TLS *tls.Config
	// DialOptions follow the client's defaults (credentials from TLS,
	// reconnect backoff from 100 ms to 2 s, keepalive), so they can
	// override them.
	DialOptions []grpc.DialOption
	// MaxBatch caps the checks of one RPC. Zero means 1000, the nodes'
	// default bound; it must not exceed the nodes' --max-batch.
	MaxBatch int
	// MaxInFlight bounds the RPCs in flight to one node. Zero means 4.
	// Fewer slots merge more checks per RPC under load, more slots send
	// sooner. Measured (docs/PERFORMANCE.md, "RPC slots of the client"):
	// 32 goroutines of one check each against one node, 1 slot sends ~16
	// checks per RPC and costs the node 14–34% less CPU per check than 4
	// (~5), at a lower p50; but with 32 callers of 100 checks, 4 slots
	// answer 5–27% more checks/s. The default stays 4 for the bulk case.
	MaxInFlight int
	// Timeout bounds each RPC; zero means 1 s. A caller's context bounds
	// its call as well.
	Timeout time.Duration
	// NoRouting turns owner-aware routing off: every check goes to the
	// targets (still coalesced), which forward it to its owner.
	NoRouting bool
	// Leases lets the client decide the checks of its hot keys itself,
	// from leases of their capacity that the keys' owners grant it
	// (the package doc, "Leases"): a check decided from a lease costs no
	// RPC. Off by default. Leases serve the TOKEN_BUCKET checks (of
	// Check and CheckBatch) with a rule, hits, no warm-up or behavior
	// flags and outside a chained group;
	// it needs routing (not NoRouting) and nodes that grant client leases
	// (--leases, and mTLS or --client-leases). A crash of the client
	// costs the cluster at most the hits of its leases, unused until they
	// expire (half a second): under-admission, never over-admission.
	Leases bool
	// LeaseThreshold is the rate, in checks per second of one key, above
	// which the client asks for a lease of it. Zero means 100. Lower
	// lends more keys, each a share of its capacity the other callers
	// cannot use meanwhile.
	LeaseThreshold float64
}

// Errors of the client. A failed call wraps one of them, so that
// errors.Is tells the kinds apart.
var (
	// ErrClosed: the client was closed before the check was answered.
	ErrClosed = errors.New("client: closed")
	// ErrUnavailable: no node could be reached, or the node answered the
	// check with Reason limit.Unavailable (its owner unreachable under a
	// fail-closed policy).
	ErrUnavailable = transport.ErrUnavailable
	// ErrTimeout: the call did not complete within Config.Timeout.
	ErrTimeout = transport.ErrTimeout
	// ErrOverloaded: the node refused the call for overload, deciding
	// nothing; RetryDelay says when to try again.
	ErrOverloaded = transport.ErrOverloaded
)

// RetryDelay returns the delay an overloaded node asked for in err, and
// false when err carries none.
func RetryDelay(err error) (time.Duration, bool) { return transport.RetryDelay(err) }

// Client is a client of a shardlimiter cluster. It is safe for concurrent
// use; see the package doc for routing, coalescing and Close.
type Client struct {
	cfg    dial.PeerConfig // for every node's BatchClient
	routes atomic.Pointer[routes]
	rr     atomic.Uint64 // round robin over live nodes
	closed atomic.Bool
	// inflight counts the checks of calls not yet returned (tests wait on it).
	inflight atomic.Int64

	mu    sync.Mutex
	dests map[string]*dest // by address: targets and members
	seeds []*dest          // the targets, never retired

	stopWatch context.CancelFunc
	watchDone chan struct{} // closed when the watch has exited; nil with NoRouting
	leases    *leaseHolder  // nil without Config.Leases
	sweepDone chan struct{} // closed when the lease sweep has exited; nil without leases
	closeOnce sync.Once
}

// New prepares a client of the cluster at cfg.Targets. Connections are made
// lazily. Unless cfg.NoRouting, it starts the ring watch and waits, at most
// until ctx is done, for the first ring or the first failure to get one;
// without a ring the client sends every check to the targets until the
// watch gets one. It fails only for a bad Config.
func New(ctx context.Context, cfg Config) (*Client, error) {
	if len(cfg.Targets) == 0 {
		return nil, errors.New("client: Config.Targets is empty")
	}
	c := &Client{dests: make(map[string]*dest)}
	c.cfg = dial.PeerConfig{MaxBatch: cfg.MaxBatch, MaxInFlight: cfg.MaxInFlight, Timeout: cfg.Timeout}
	if cfg.TLS != nil {
		c.cfg.DialOptions = append(c.cfg.DialOptions, grpc.WithTransportCredentials(credentials.NewTLS(cfg.TLS)))
	}
	c.cfg.DialOptions = append(c.cfg.DialOptions, cfg.DialOptions...)
	for _, addr := range cfg.Targets {
		d, err := c.destLocked(addr)
		if err != nil {
			c.closeDests()
			return nil, err
		}
		c.seeds = append(c.seeds, d)
	}
	if cfg.NoRouting {
		return c, nil
	}
	wctx, stop := context.WithCancel(context.Background())
	c.stopWatch, c.watchDone = stop, make(chan struct{})
	first := make(chan struct{})
	go func() {
		defer close(c.watchDone)
		c.watch(wctx, sync.OnceFunc(func() { close(first) }))
	}()
	if cfg.Leases {
		c.leases, c.sweepDone = newLeaseHolder(c, cfg.LeaseThreshold), make(chan struct{})
		go func() {
			defer close(c.sweepDone)
			c.leases.sweep(wctx)
		}()
	}
	select {
	case <-first:
	case <-ctx.Done():
	}
	return c, nil
}

// destLocked returns the node at addr, connecting lazily the first time.
// c.mu is held, or c is not shared yet.
func (c *Client) destLocked(addr string) (*dest, error) {
	if d, ok := c.dests[addr]; ok {
		return d, nil
	}
	bc, err := dial.NewBatchClient(addr, c.cfg)
	if err != nil {
		return nil, fmt.Errorf("client: %w", err)
	}
	d := &dest{bc: bc}
	c.dests[addr] = d
	return d, nil
}

// Close stops the ring watch, gives back what is left of the client's
// leases (waiting for the answers, each bounded by Timeout), answers every call not yet answered with
// ErrClosed and closes the connections. It returns once every goroutine the
// client started has exited. It is idempotent; calls after it fail with
// ErrClosed.
func (c *Client) Close() error {
	c.closeOnce.Do(func() {
		c.closed.Store(true)
		if c.stopWatch != nil {
			c.stopWatch()
			<-c.watchDone // no dest is made or retired after this
		}
		if c.leases != nil {
			<-c.sweepDone
			c.leases.close() // gives the leases back while the connections are open
		}
		c.closeDests()
	})
	return nil
}

func (c *Client) closeDests() {
	c.mu.Lock()
	all := make([]*dest, 0, len(c.dests))
	for _, d := range c.dests {
		all = append(all, d)
	}
	c.mu.Unlock()
	for _, d := range all {
		_ = d.bc.Close() // a BatchClient's Close only reports the connection's, which is never of use here
	}
}
