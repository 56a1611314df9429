// Package peer implements a shardlimiter node: it answers batches of
// rate-limit checks, deciding on its own tables the keys it owns and
// forwarding the others to their owners.
//
// # Model
//
// Every node holds one table per algorithm (bucket/ and window/), a ring
// snapshot (ring/) that names each key's owner, and a batching client per
// peer (transport/). A batch is validated item by item, the clock is read
// once, each item is routed on its unique_key: owned here → decided at once;
// owned elsewhere → grouped by owner and forwarded in one RPC per owner. The
// owner decides on its own tables and never forwards again (one hop at
// most). When an owner cannot be reached, the node's FailPolicy decides.
//
// Membership comes from gossip (Membership, hashicorp/memberlist). One
// goroutine rebuilds the ring snapshot when membership changes; checks load
// the current snapshot without a lock.
//
// # Concurrency and lifecycle
//
// New starts nothing. Run starts gossip, the ring rebuilder and the idle-key
// sweeper and returns after all of them have stopped. Check and CheckLocal
// are safe for concurrent use and answer every item, before and after Run.
// Leave announces departure and re-routes this node's keys to the others;
// the caller then stops its servers and cancels Run.
package peer

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/shardlimiter/shardlimiter/bucket"
	"github.com/shardlimiter/shardlimiter/limit"
	"github.com/shardlimiter/shardlimiter/ring"
	"github.com/shardlimiter/shardlimiter/table"
	"github.com/shardlimiter/shardlimiter/transport"
	"github.com/shardlimiter/shardlimiter/window"
)

// Gossip is what a node needs of its membership. *Membership implements
// it; tests may use a fake.
type Gossip interface {
	// Run joins and serves gossip until ctx is done.
	Run(ctx context.Context) error
	// Members returns the alive members, this node included.
	Members() []ring.Member
	// Changed is signalled (coalesced) whenever Members may have changed.
	Changed() <-chan struct{}
	// Joined reports whether the node has joined its seeds (or has none).
	Joined() bool
	// Leave tells the others this node is going.
	Leave(timeout time.Duration) error
}

// Config configures a Node.
type Config struct {
	// Name identifies the node on the ring. Required.
	Name string
	// GRPCAddr is the address peers forward to; shown in Cluster.
	GRPCAddr string
	// Gossip supplies membership; nil makes a cluster of one.
	Gossip Gossip
	// MaxKeys caps the keys of each algorithm's table; 0 means
	// table.DefaultMaxKeys.
	MaxKeys int
	// FailPolicy decides checks whose owner cannot be reached.
	FailPolicy FailPolicy
	// SweepInterval is how often idle keys are swept; 0 means 1 s.
	SweepInterval time.Duration
	// SweepBudget is how many keys each sweep of each table looks at; 0
	// means 65536. Larger frees memory sooner, at more CPU per tick.
	SweepBudget int
	// LeaveTimeout bounds the gossip leave broadcast; 0 means 3 s.
	LeaveTimeout time.Duration
	// Ring configures the ring; every node must use the same.
	Ring ring.Config
	// Peer configures the forwarding clients.
	Peer transport.PeerConfig
	// PeerBackoff is how long forwarding to a peer is suspended after a
	// forward to it timed out or was refused (its checks go to the fail
	// policy meanwhile); it doubles on each further failure, up to 20×,
	// and resets on a success. 0 means 100 ms. Longer spares clients more
	// timeouts while a peer is dead; shorter returns to a recovered peer
	// sooner.
	PeerBackoff time.Duration
	// Registerer receives the node's metrics; nil registers nothing.
	Registerer prometheus.Registerer
	// Logger receives the node's logs; nil discards them.
	Logger *slog.Logger
	// Now reads the clock; nil means time.Now. For tests.
	Now func() time.Time
}

// view is a ring snapshot with this node's place in it.
type view struct {
	snap *ring.Snapshot
	self int // index of this node in snap.Members(), -1 when absent
}

// Node is one shardlimiter node. Its methods are safe for concurrent use.
type Node struct {
	cfg      Config
	log      *slog.Logger
	limiters [5]limit.Limiter // by limit.Algorithm
	view     atomic.Pointer[view]
	// rebuildMu serializes rebuilds (the membership watcher and Leave), so
	// that one which read leaving as false cannot store its ring after
	// Leave's and put this node back on it; versions are stored in order.
	rebuildMu sync.Mutex
	version   atomic.Uint64
	leaving   atomic.Bool
	peers     peerSet
	m         *metrics
	keyBufs   sync.Pool // *keyBuf
}

// New returns a node. It starts nothing.
func New(cfg Config) (*Node, error) {
	if cfg.Name == "" {
		return nil, errors.New("peer: node name is empty")
	}
	if int(cfg.FailPolicy) >= len(policyNames) {
		return nil, errors.New("peer: unknown fail policy")
	}
	if cfg.SweepInterval <= 0 {
		cfg.SweepInterval = time.Second
	}
	if cfg.SweepBudget <= 0 {
		cfg.SweepBudget = 1 << 16
	}
	if cfg.LeaveTimeout <= 0 {
		cfg.LeaveTimeout = 3 * time.Second
	}
	if cfg.PeerBackoff <= 0 {
		cfg.PeerBackoff = 100 * time.Millisecond
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	tc := table.Config{MaxKeys: cfg.MaxKeys}
	n := &Node{cfg: cfg, log: cfg.Logger}
	n.limiters = [5]limit.Limiter{
		limit.TokenBucket:   bucket.NewTokenBucket(tc),
		limit.LeakyBucket:   bucket.NewLeakyBucket(tc),
		limit.FixedWindow:   window.NewFixed(tc),
		limit.SlidingWindow: window.NewSliding(tc),
		limit.SlidingLog:    window.NewLog(tc),
	}
	n.keyBufs.New = func() any { return &keyBuf{b: make([]byte, 0, 64)} }
	n.peers.cfg, n.peers.backoff = cfg.Peer, cfg.PeerBackoff
	n.peers.now = func() int64 { return n.cfg.Now().UnixNano() }
	n.m = newMetrics(cfg.Registerer, n)
	if err := n.rebuild([]ring.Member{n.selfMember()}); err != nil {
		return nil, err
	}
	return n, nil
}

func (n *Node) selfMember() ring.Member { return ring.Member{Name: n.cfg.Name, Addr: n.cfg.GRPCAddr} }

// Name returns the node's name.
func (n *Node) Name() string { return n.cfg.Name }

// Run serves gossip, rebuilds the ring on membership changes and sweeps
// idle keys until ctx is done, then closes the peer clients. It returns
// after everything it started has exited.
func (n *Node) Run(ctx context.Context) error {
	// A gossip failure must stop the watcher and sweeper too, or wg.Wait
	// below would wait for a ctx nobody cancels.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	errc := make(chan error, 1)
	if g := n.cfg.Gossip; g != nil {
		wg.Go(func() {
			if err := g.Run(ctx); err != nil && ctx.Err() == nil {
				errc <- err
			}
		})
		wg.Go(func() { n.watchMembership(ctx, g) })
	}
	wg.Go(func() { n.sweepLoop(ctx) })
	var err error
	select {
	case <-ctx.Done():
	case err = <-errc:
	}
	cancel()
	wg.Wait()
	n.peers.closeAll()
	return err
}

// watchMembership rebuilds the ring each time gossip signals a change.
// Signals arriving during a rebuild coalesce into one more rebuild.
func (n *Node) watchMembership(ctx context.Context, g Gossip) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-g.Changed():
			if err := n.rebuild(g.Members()); err != nil {
				n.log.Error("ring rebuild failed", "err", err)
			}
		}
	}
}

// rebuild installs a ring snapshot for members. While leaving, this node
// is left out, so its checks go to the nodes that now own its keys.
func (n *Node) rebuild(members []ring.Member) error {
	n.rebuildMu.Lock()
	defer n.rebuildMu.Unlock()
	kept := members[:0:0]
	for _, m := range members {
		if n.leaving.Load() && m.Name == n.cfg.Name {
			continue
		}
		kept = append(kept, m)
	}
	if len(kept) == 0 {
		kept = append(kept, n.selfMember())
	}
	snap, err := ring.New(kept, n.version.Add(1), n.cfg.Ring)
	if err != nil {
		return err
	}
	v := &view{snap: snap, self: -1}
	for i, m := range snap.Members() {
		if m.Name == n.cfg.Name {
			v.self = i
		}
	}
	n.view.Store(v)
	n.peers.retain(snap.Members())
	n.m.ringMembers.Set(float64(len(kept)))
	n.m.ringRebuilds.Inc()
	n.log.Info("ring rebuilt", "version", snap.Version(), "members", len(kept))
	return nil
}

func (n *Node) sweepLoop(ctx context.Context) {
	t := time.NewTicker(n.cfg.SweepInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			now := n.cfg.Now().UnixNano()
			removed := 0
			for _, l := range n.limiters {
				removed += l.Sweep(now, n.cfg.SweepBudget)
			}
			n.m.swept.Add(float64(removed))
		}
	}
}

// Leave announces that this node is going and re-routes its keys to the
// others. The node keeps answering (forwarding what it no longer owns)
// until the caller stops its servers. Idempotent.
func (n *Node) Leave() error {
	if n.leaving.Swap(true) {
		return nil
	}
	g := n.cfg.Gossip
	if g == nil {
		return nil
	}
	err := g.Leave(n.cfg.LeaveTimeout)
	if rerr := n.rebuild(g.Members()); rerr != nil && err == nil {
		err = rerr
	}
	return err
}

// Ready reports whether the node should receive traffic: joined (or alone
// by configuration), on its own ring, and not leaving.
func (n *Node) Ready() bool {
	if n.leaving.Load() {
		return false
	}
	if g := n.cfg.Gossip; g != nil && !g.Joined() {
		return false
	}
	return n.view.Load().self >= 0
}
