package peer

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/shardlimiter/shardlimiter/limit"
	"github.com/shardlimiter/shardlimiter/transport"
	"github.com/shardlimiter/shardlimiter/transport/dial"
)

// MemNet connects nodes in one process without gRPC or sockets: its links
// (a Dialer for Config.Peers) call the other node's server side directly
// (CheckLocal, Push, Pull, InspectLocal, Ring), so that many nodes can run
// in one test or simulation. A call can be delayed by a latency, and the
// links between two nodes can be cut (a partition) and healed.
//
// What the gRPC links do on the way and MemNet does not: encode and decode
// (keys and states are handed over as they are), the peer listener's
// in-flight bound, and batching of concurrent forwards. Errors are
// transport's, as the gRPC links classify them: a node removed or cut off
// fails a call with transport.ErrUnavailable at once, a call whose latency
// outlasts its timeout with transport.ErrTimeout.
//
// A MemNet is safe for concurrent use; its zero value is not usable: use
// NewMemNet.
type MemNet struct {
	mu      sync.Mutex
	nodes   map[string]*Node    // by address; guarded by mu
	cut     map[[2]string]bool  // node-name pairs, in order; guarded by mu
	latency time.Duration       // guarded by mu
	timeout time.Duration       // guarded by mu
	links   map[*memLink]string // open links, for Links; guarded by mu
}

// NewMemNet returns a network with no nodes, no latency, and forwards
// bounded by dial.DefaultPeerTimeout (SetTimeout).
func NewMemNet() *MemNet {
	return &MemNet{nodes: map[string]*Node{}, cut: map[[2]string]bool{}, links: map[*memLink]string{},
		timeout: dial.DefaultPeerTimeout}
}

// Add makes n reachable at addr: the address its members publish (its
// Config.PeerAddr, or GRPCAddr when that is empty). A node added again at
// addr replaces the one there (a restart).
func (mn *MemNet) Add(addr string, n *Node) {
	mn.mu.Lock()
	defer mn.mu.Unlock()
	mn.nodes[addr] = n
}

// Remove makes addr unreachable, as a stopped or crashed node's port is:
// calls to it fail with transport.ErrUnavailable.
func (mn *MemNet) Remove(addr string) {
	mn.mu.Lock()
	defer mn.mu.Unlock()
	delete(mn.nodes, addr)
}

// SetLatency delays every call by d before it reaches the other node (a
// round trip's worth; the answer comes back at once).
func (mn *MemNet) SetLatency(d time.Duration) {
	mn.mu.Lock()
	defer mn.mu.Unlock()
	mn.latency = d
}

// SetTimeout bounds each forward, as dial.PeerConfig.Timeout does;
// state calls get at least transport.StateTimeout. 0 or less means
// dial.DefaultPeerTimeout.
func (mn *MemNet) SetTimeout(d time.Duration) {
	if d <= 0 {
		d = dial.DefaultPeerTimeout
	}
	mn.mu.Lock()
	defer mn.mu.Unlock()
	mn.timeout = d
}

// Cut partitions the nodes named a and b: calls between them, either way,
// fail with transport.ErrUnavailable until Heal. Calls already past their
// latency are not affected.
func (mn *MemNet) Cut(a, b string) {
	mn.mu.Lock()
	defer mn.mu.Unlock()
	mn.cut[pair(a, b)] = true
}

// Heal ends a Cut between the nodes named a and b.
func (mn *MemNet) Heal(a, b string) {
	mn.mu.Lock()
	defer mn.mu.Unlock()
	delete(mn.cut, pair(a, b))
}

// Links returns how many links are open from the node named self: the
// peer set closes a peer's link when it leaves the ring.
func (mn *MemNet) Links(self string) int {
	mn.mu.Lock()
	defer mn.mu.Unlock()
	k := 0
	for _, s := range mn.links {
		if s == self {
			k++
		}
	}
	return k
}

func pair(a, b string) [2]string {
	if b < a {
		a, b = b, a
	}
	return [2]string{a, b}
}

// Dial implements Dialer. It never fails: an unknown address fails the
// link's calls instead, as an unreachable port does.
func (mn *MemNet) Dial(self, addr string) (Link, error) {
	l := &memLink{net: mn, self: self, addr: addr}
	mn.mu.Lock()
	defer mn.mu.Unlock()
	mn.links[l] = self
	return l, nil
}

// memLink is a link of a MemNet.
type memLink struct {
	net        *MemNet
	self, addr string
	// calls counts the calls in flight; Close waits for them. A
	// WaitGroup, not a lock held through each call: a goroutine waiting
	// for a lock is not durably blocked in a testing/synctest bubble, so
	// a Close waiting for a call that waits for the bubble's clock (a
	// pull waiting for its puller's ring) stopped the clock for good
	// (seen: package sim's 50-member cluster hung forming).
	mu     sync.Mutex
	closed bool // guarded by mu
	calls  sync.WaitGroup
}

// errMemUnreachable is the cause of a call to a node that is not there or
// cut off.
var errMemUnreachable = errors.New("peer: memnet: node unreachable")

// call runs fn against the node at l.addr once the latency has passed,
// with ctx bounded by the net's timeout (at least floor), and classifies
// its error as the gRPC links do.
func (l *memLink) call(ctx context.Context, floor time.Duration, fn func(ctx context.Context, n *Node) error) error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return transport.ErrClosed
	}
	l.calls.Add(1)
	l.mu.Unlock()
	defer l.calls.Done()
	mn := l.net
	mn.mu.Lock()
	latency, timeout := mn.latency, max(mn.timeout, floor)
	mn.mu.Unlock()
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if latency > 0 {
		t := time.NewTimer(latency)
		defer t.Stop()
		select {
		case <-t.C:
		case <-cctx.Done():
			return l.classify(ctx, cctx.Err())
		}
	}
	n, err := l.reach()
	if err != nil {
		return err
	}
	return l.classify(ctx, fn(cctx, n))
}

// reach returns the node at l.addr unless it is gone or cut off from this
// link's node.
func (l *memLink) reach() (*Node, error) {
	mn := l.net
	mn.mu.Lock()
	defer mn.mu.Unlock()
	n := mn.nodes[l.addr]
	if n == nil || mn.cut[pair(l.self, n.Name())] {
		return nil, fmt.Errorf("%w: %s: %w", transport.ErrUnavailable, l.addr, errMemUnreachable)
	}
	return n, nil
}

// classify turns the end of the call's own deadline, while the caller's
// ctx still runs, into transport.ErrTimeout.
func (l *memLink) classify(ctx context.Context, err error) error {
	if err != nil && ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("%w: %s: %w", transport.ErrTimeout, l.addr, err)
	}
	return err
}

func (l *memLink) Forward(ctx context.Context, checks []limit.Check, standin bool) (res []limit.Result, err error) {
	err = l.call(ctx, 0, func(ctx context.Context, n *Node) error {
		res, err = n.checkLocal(ctx, slices.Clone(checks), standin)
		return err
	})
	return res, err
}

func (l *memLink) Push(ctx context.Context, why limit.Transfer, partitions []int, keys []limit.KeyState) error {
	return l.call(ctx, transport.StateTimeout, func(ctx context.Context, n *Node) error {
		return n.Push(ctx, l.self, why, slices.Clone(partitions), keys)
	})
}

func (l *memLink) Pull(ctx context.Context, r limit.PullRequest) (keys []limit.KeyState, err error) {
	r.From, r.Partitions, r.Names = l.self, slices.Clone(r.Partitions), slices.Clone(r.Names)
	err = l.call(ctx, transport.StateTimeout, func(ctx context.Context, n *Node) error {
		keys, err = n.Pull(ctx, r)
		return err
	})
	return keys, err
}

func (l *memLink) Inspect(ctx context.Context, c limit.Check) (v limit.KeyView, err error) {
	err = l.call(ctx, transport.StateTimeout, func(ctx context.Context, n *Node) error {
		v, err = n.InspectLocal(ctx, c)
		return err
	})
	return v, err
}

func (l *memLink) Ring(ctx context.Context) (info transport.RingInfo, err error) {
	err = l.call(ctx, transport.StateTimeout, func(_ context.Context, n *Node) error {
		info = n.Ring()
		return nil
	})
	return info, err
}

func (l *memLink) Lease(ctx context.Context, r limit.LeaseRequest) (g limit.LeaseGrant, err error) {
	r.From = l.self
	err = l.call(ctx, 0, func(ctx context.Context, n *Node) error {
		g, err = n.Lease(ctx, r)
		return err
	})
	return g, err
}

// Close waits for the link's calls in flight; later calls fail with
// transport.ErrClosed.
func (l *memLink) Close() error {
	l.mu.Lock()
	l.closed = true
	l.mu.Unlock()
	l.calls.Wait()
	l.net.mu.Lock()
	delete(l.net.links, l)
	l.net.mu.Unlock()
	return nil
}

var _ Dialer = (*MemNet)(nil)
