package dial

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/shardlimiter/shardlimiter/transport"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/shardlimiter/shardlimiter/limit"
)

// PeerConfig configures a PeerClient.
type PeerConfig struct {
	// MaxBatch caps the checks of one RPC. Zero means transport.DefaultMaxBatch
	// (1000). It must not exceed the owner's listener MaxBatch (server.Config), or the
	// owner refuses the larger RPCs. Bigger batches amortize more per-RPC
	// cost; smaller ones spread a burst over more slots.
	MaxBatch int
	// MaxInFlight bounds the RPCs in flight to the owner at once. Zero means
	// 4. More slots send sooner under load but merge less; fewer slots merge
	// more checks per RPC at the cost of queueing.
	MaxInFlight int
	// Timeout bounds each RPC, connecting included. Zero means 1s. A check
	// queued behind MaxInFlight busy RPCs may wait up to about one Timeout
	// for a slot before its own RPC starts.
	Timeout time.Duration
	// Metrics records forwarding; nil records nothing.
	Metrics *Metrics
	// DialOptions follow the defaults (plaintext credentials, reconnect
	// backoff from 100ms up to 2s, keepalive pings every
	// PeerKeepaliveTime, static flow-control windows of transport.FlowWindow), so
	// they can override them.
	DialOptions []grpc.DialOption
	// Standin marks every forward of the client as one the owner's
	// stand-in decides (see IsStandin): the owner could not be reached.
	Standin bool
}

// Defaults of PeerConfig.
const (
	DefaultMaxInFlight = 4
	DefaultPeerTimeout = time.Second
)

// PeerClient forwards checks to one owner's Peers service, merging the
// checks of concurrent callers into shared RPCs (see batcher.go).
//
// Forward may be called from any number of goroutines; Close may be called
// at any time, more than once, concurrently with Forward. The client starts
// goroutines only while RPCs are in flight, and none is left once Close has
// returned.
type PeerClient struct {
	addr        string
	conn        *grpc.ClientConn
	maxBatch    int
	maxInFlight int
	timeout     time.Duration
	metrics     *Metrics
	standin     bool // see PeerConfig.Standin
	api         bool // sends to RateLimiter.GetRateLimits: a BatchClient

	closing   context.Context // canceled by Close: ends the RPCs in flight
	cancel    context.CancelFunc
	closeOnce sync.Once
	closeErr  error
	// sends counts running senders (inline or goroutine). Add is called only
	// with mu held and closed false, so it never races with Close's Wait.
	sends sync.WaitGroup

	streams streamPool // idle streams, see streamclient.go

	mu       sync.Mutex
	closed   bool
	inFlight int       // RPC slots taken, ≤ maxInFlight
	pending  []segment // accepted, not yet sent; empty whenever inFlight < maxInFlight
}

// NewPeerClient prepares a client for the owner at addr (host:port or any
// gRPC target). It connects lazily, on the first RPC, and starts no
// goroutine of its own.
func NewPeerClient(addr string, cfg PeerConfig) (*PeerClient, error) {
	c := &PeerClient{
		addr:        addr,
		maxBatch:    cfg.MaxBatch,
		maxInFlight: cfg.MaxInFlight,
		timeout:     cfg.Timeout,
		metrics:     cfg.Metrics,
	}
	if c.maxBatch <= 0 {
		c.maxBatch = transport.DefaultMaxBatch
	}
	if c.maxInFlight <= 0 {
		c.maxInFlight = DefaultMaxInFlight
	}
	if c.timeout <= 0 {
		c.timeout = DefaultPeerTimeout
	}
	c.standin = cfg.Standin
	conn, err := dialPeer(addr, cfg)
	if err != nil {
		return nil, fmt.Errorf("transport: peer client for %s: %w", addr, err)
	}
	c.conn = conn
	c.closing, c.cancel = context.WithCancel(context.Background())
	return c, nil
}

// dialPeer connects lazily to a peer with cfg's options after the defaults.
func dialPeer(addr string, cfg PeerConfig) (*grpc.ClientConn, error) {
	timeout := cfg.Timeout
	if timeout <= 0 {
		timeout = DefaultPeerTimeout
	}
	opts := append([]grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 2 * time.Second},
			MinConnectTimeout: timeout,
		}),
		peerKeepalive(),
		grpc.WithStaticStreamWindowSize(transport.FlowWindow), // see transport.FlowWindow
		grpc.WithStaticConnWindowSize(transport.FlowWindow),
	}, cfg.DialOptions...)
	return grpc.NewClient(addr, opts...)
}

// Addr returns the address the client was created for.
func (c *PeerClient) Addr() string { return c.addr }

// Forward asks the owner to decide checks and returns one Result per check,
// in order. It does not retain checks.
//
// When some checks could not be answered it returns, with the results, the
// first failure: errors.Is(err, transport.ErrTimeout), transport.ErrUnavailable or transport.ErrClosed
// tell the kinds apart (anything else is a failure of the owner, e.g. a
// version mismatch). The checks concerned then carry Reason
// limit.Unavailable and the error's text; the others carry the owner's
// answers, which may be per-item errors of their own (e.g. limit.Invalid).
// If ctx ends first, Forward returns nil and an error wrapping ctx.Err().
func (c *PeerClient) Forward(ctx context.Context, checks []limit.Check) ([]limit.Result, error) {
	if len(checks) == 0 {
		return nil, nil
	}
	if err := ctx.Err(); err != nil {
		return nil, c.wrap(err)
	}
	cl, err := newCall(checks)
	if err != nil {
		return failAll(len(checks), c.wrap(err))
	}
	// A connection whose last dial failed (the peer was unreachable: a
	// partition, since healed) fails every call at once with that error
	// until its backoff ends, up to 2 s. Dial again now: this forward may
	// still fail, but the next one (the forwarding suspension's probe,
	// peer/suspension.go, within 1 s) finds the connection made. Seen: a
	// healed peer's checks went to its stand-in for 2 s after the heal.
	if c.conn.GetState() == connectivity.TransientFailure {
		c.conn.ResetConnectBackoff()
	}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		putCall(cl)
		return nil, c.wrap(transport.ErrClosed)
	}
	c.pending = append(c.pending, segment{call: cl, lo: 0, hi: len(checks)})
	inline := c.startLocked()
	c.mu.Unlock()
	c.metrics.forward(len(checks))

	if inline != nil {
		c.runInline(ctx, inline)
	}
	select {
	case <-cl.done:
		results, err := cl.results, cl.failure()
		if err == nil {
			// Every batch carrying its checks was answered, so gRPC has
			// sent the encoding and reads it no more. A failed batch may
			// have left it queued on its connection: not reused.
			putCall(cl)
		}
		return results, err
	case <-ctx.Done():
	}
	c.abandon(cl)
	select {
	case <-cl.done: // answered meanwhile
		return cl.results, cl.failure()
	default:
		return nil, c.wrap(ctx.Err())
	}
}

// failAll answers n checks that could not be sent with err, as a failed RPC
// would answer them.
func failAll(n int, err error) ([]limit.Result, error) {
	results := make([]limit.Result, n)
	r := limit.Result{Error: err.Error(), Reason: limit.Unavailable}
	for i := range results {
		results[i] = r
	}
	return results, err
}

// Close answers every accepted check not yet answered with transport.ErrClosed, ends
// the RPCs in flight, waits for its senders to exit and closes the
// connection. It is idempotent; later calls return the first result.
//
// The race between Close and a concurrent Forward is settled by mu: Forward
// checks closed and appends to pending under mu; Close sets closed and
// empties pending under mu. So either Forward came first, and its checks are
// in pending (answered here with transport.ErrClosed) or in a send (whose RPC the
// cancel below ends, answered with transport.ErrClosed), or Close came first and
// Forward returns transport.ErrClosed without accepting anything. A sender is counted
// in sends only under mu while closed is false, and after closed no new send
// starts (pending stays empty), so sends.Wait cannot miss one.
func (c *PeerClient) Close() error {
	c.closeOnce.Do(func() {
		c.mu.Lock()
		c.closed = true
		pending := c.pending
		c.pending = nil
		c.mu.Unlock()

		err := c.wrap(transport.ErrClosed)
		for _, s := range pending {
			s.fail(err)
		}
		c.cancel()
		c.closeStreams()
		c.sends.Wait()
		c.closeErr = c.conn.Close()
	})
	return c.closeErr
}

// call names what this client asks of whom, for its errors: a forward to
// the owner, or (a BatchClient) a call of the node's client API.
func (c *PeerClient) call() string {
	if c.api {
		return c.addr
	}
	return "forward to " + c.addr
}

// wrap names the call in err.
func (c *PeerClient) wrap(err error) error {
	for _, kind := range []error{transport.ErrClosed, transport.ErrShuttingDown, transport.ErrUnavailable, transport.ErrTimeout, transport.ErrOverloaded} {
		if err == kind {
			return transport.CallFailed(c.call(), kind, nil)
		}
	}
	return transport.CallFailed(c.call(), nil, err)
}

// classify turns a failed RPC into the error its checks are answered with,
// and the metric reason.
func (c *PeerClient) classify(parent context.Context, err error) (int, error) {
	switch {
	case c.closing.Err() != nil:
		return peerErrClosed, c.wrap(transport.ErrClosed)
	case errors.Is(parent.Err(), context.Canceled):
		return peerErrOther, c.wrap(context.Canceled)
	}
	switch status.Code(err) {
	case codes.DeadlineExceeded:
		return peerErrTimeout, transport.CallFailed(c.call(), transport.ErrTimeout, err)
	case codes.Unavailable:
		return peerErrUnavailable, transport.CallFailed(c.call(), transport.ErrUnavailable, err)
	}
	if transport.IsShed(err) {
		// The owner shed the call: nothing was decided there, so the
		// checks follow the fail policy, but the owner is not down.
		return peerErrOverloaded, transport.CallFailed(c.call(), transport.ErrOverloaded, err)
	}
	return peerErrOther, c.wrap(err)
}
