// Package peer implements a shardlimiter node: it answers batches of
// rate-limit checks, deciding on its own tables the keys it owns and
// forwarding the others to their owners.
//
// # Model
//
// Every node holds one table per algorithm (bucket/ and window/), a ring
// snapshot (ring/) that names each key's owner, and a Link per peer
// (links.go: over gRPC by default, grpcpeers.go; in memory on a MemNet,
// memnet.go). A batch is validated item by item, the clock is read
// once, each item is routed on its unique_key: owned here → decided at once;
// owned elsewhere → grouped by owner and forwarded in one RPC per owner. The
// owner decides on its own tables and never forwards again (one hop at
// most). When an owner cannot be reached, the node's FailPolicy decides.
// With Config.Leases, a key this node forwards often is decided here from
// a lease, a share of its capacity its owner granted and debited from the
// key (lease.go, leasehold.go).
//
// Membership comes from gossip (package gossip, hashicorp/memberlist). One
// goroutine rebuilds the ring snapshot when membership changes; checks load
// the current snapshot without a lock.
//
// # Concurrency and lifecycle
//
// New starts nothing. Run starts gossip, the ring rebuilder, the idle-key
// sweeper and the state mover's jobs (mover.go: handoff transfers,
// replication, snapshots) and returns after all of them have stopped. Check and CheckLocal
// are safe for concurrent use and answer every item, before and after Run.
// Leave announces departure and re-routes this node's keys to the others;
// the caller then stops its servers and cancels Run.
package peer

import (
	"cmp"
	"context"
	"errors"
	"hash/maphash"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/shardlimiter/shardlimiter/bucket"
	"github.com/shardlimiter/shardlimiter/cell"
	"github.com/shardlimiter/shardlimiter/gubernator"
	"github.com/shardlimiter/shardlimiter/limit"
	"github.com/shardlimiter/shardlimiter/ring"
	"github.com/shardlimiter/shardlimiter/table"
	"github.com/shardlimiter/shardlimiter/transport/dial"
	"github.com/shardlimiter/shardlimiter/window"
)

// Gossip is what a node needs of its membership. *gossip.Membership
// implements it; tests may use a fake.
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

// deathRefuter is a Gossip that tells when other members held this node
// dead (gossip.Membership.DeathsRefuted): a count that only rises.
type deathRefuter interface {
	DeathsRefuted() uint64
}

// Config configures a Node.
type Config struct {
	// Name identifies the node on the ring. Required.
	Name string
	// GRPCAddr is this node's client API address; shown in Cluster.
	GRPCAddr string
	// PeerAddr is the address peers forward to and move state to; shown in
	// Cluster. Empty means GRPCAddr.
	PeerAddr string
	// Gossip supplies membership; nil makes a cluster of one.
	Gossip Gossip
	// MaxKeys caps the keys of each algorithm's table; 0 means
	// table.DefaultMaxKeys.
	MaxKeys int
	// MaxMemory is the node's memory budget in bytes. The tables together
	// hold at most TableBudget(MaxMemory) (key strings, per-key state,
	// logs, replicas); beyond that the least recently used keys of any
	// table are evicted. 0 means no byte bound (only MaxKeys).
	MaxMemory int64
	// FailPolicy decides checks whose owner cannot be reached.
	FailPolicy FailPolicy
	// SweepInterval is how often idle keys are swept; 0 means 1 s. While
	// sweeps find nothing to remove it doubles, up to 32 × SweepInterval
	// (see sweepLoop).
	SweepInterval time.Duration
	// SweepBudget is how many keys each sweep of each table looks at; 0
	// means 65536. Larger frees memory sooner, at more CPU per tick.
	SweepBudget int
	// LeaveTimeout bounds the gossip leave broadcast; 0 means 3 s.
	LeaveTimeout time.Duration
	// Ring configures the ring; every node must use the same.
	Ring ring.Config
	// Peer configures the gRPC clients to the peers, when Peers is nil.
	Peer dial.PeerConfig
	// Peers is how the node reaches the other nodes (links.go); nil means
	// over gRPC with Peer (grpcpeers.go). A MemNet connects nodes in one
	// process.
	Peers Dialer
	// PeerBackoff is how long forwarding to a peer is suspended after a
	// forward to it timed out or was refused (its checks go to the fail
	// policy meanwhile); it doubles on each further failure, up to 10×,
	// and resets on a success. 0 means 100 ms. Longer spares clients more
	// timeouts while a peer is dead; shorter returns to a recovered peer
	// sooner.
	PeerBackoff time.Duration
	// ReplicationInterval is how often the keys changed since the last time
	// are sent to the node that would own them next (see replicate.go); a
	// crash loses at most this much of each key's hits. 0 turns replication
	// off: a crashed node's keys then restart from a fresh state, and a
	// check whose owner cannot be reached goes straight to FailPolicy.
	// Shorter loses less in a crash for more, smaller, transfers.
	ReplicationInterval time.Duration
	// HandoffTimeout bounds how long Leave waits for the new owners to take
	// this node's keys (see handoff.go); 0 means 5 s. Past it the node says
	// so in its log and a metric and leaves anyway.
	HandoffTimeout time.Duration
	// StateDir is the directory of this node's snapshot file (see
	// durable.go; the file is named after SnapshotName, so nodes may share
	// the directory).
	// Empty keeps state in memory only: a stop of every node loses it.
	StateDir string
	// SnapshotName names the snapshot file in StateDir; empty means Name.
	// Nodes that replace each other on one host (pods of a DaemonSet, whose
	// names change) share one, so that each finds its predecessor's file.
	SnapshotName string
	// SnapshotInterval is how often the snapshot is written when something
	// changed; 0 means DefaultSnapshotInterval. A crash of every node loses
	// at most this much of each key's hits; shorter costs a write of every
	// key held that much more often.
	SnapshotInterval time.Duration
	// MetricsMaxRules bounds the rule names that get series of their own in
	// the per-rule metrics (rulemetrics.go); checks of later names are
	// counted under rule="other". 0 means rulemetrics.DefaultMaxRules (1000).
	// Each name costs five series (~1.5 KiB) on every node and in the
	// monitoring system.
	MetricsMaxRules int
	// Leases turns leases on (lease.go, leasehold.go): this node grants
	// shares of the keys it owns to the nodes that ask, and asks for them
	// for the keys it forwards at more than LeaseThreshold checks per
	// second, then decides their checks itself. A grant is a debit of the
	// key's state, so every decider together admits no more than the owner
	// alone would. Off, this node neither grants nor asks.
	Leases bool
	// LeaseThreshold is the rate, in checks per second this node forwards
	// for one key, above which it asks the key's owner for a lease; 0
	// means DefaultLeaseThreshold. Lower decides more keys here, at the
	// cost of lease calls for keys that are barely warm.
	LeaseThreshold float64
	// Registerer receives the node's metrics; nil registers nothing.
	Registerer prometheus.Registerer
	// Logger receives the node's logs; nil discards them.
	Logger *slog.Logger
	// Now reads the clock; nil means time.Now. For tests.
	Now func() time.Time
}

// limiter is one algorithm's table: decisions, and the moving of its state.
type limiter interface {
	limit.Limiter
	limit.StateMover
	// Bytes returns the bytes the table is charged for its keys
	// (table.Budget); EvictedForBytes how many keys it evicted to keep
	// the node's byte budget.
	Bytes() int64
	EvictedForBytes() uint64
	// ExportChanged drains up to max changed keys (Changed) and hands fn
	// the state of each that Export would return, read through the
	// table's change list without a second lookup of the key.
	ExportChanged(max int, now int64, fn func(key string, state []byte)) int
}

// view is a ring snapshot with this node's place in it.
type view struct {
	snap *ring.Snapshot
	self int // index of this node in snap.Members(), -1 when absent
	// backup is snap without this node: where each key this node owns is
	// replicated. Nil when this node is alone or absent.
	backup *ring.Snapshot

	mu       sync.Mutex
	withouts map[string]*ring.Snapshot // snap without a member, built on demand
}

// without returns the ring once member name is gone: where name's keys are
// replicated. Nil when it cannot be built (name is not a member, or alone).
func (v *view) without(name string) *ring.Snapshot {
	v.mu.Lock()
	defer v.mu.Unlock()
	if w, ok := v.withouts[name]; ok {
		return w
	}
	w, err := v.snap.Without(name)
	if err != nil {
		w = nil
	}
	if v.withouts == nil {
		v.withouts = make(map[string]*ring.Snapshot)
	}
	v.withouts[name] = w
	return w
}

// Node is one shardlimiter node. Its methods are safe for concurrent use.
type Node struct {
	cfg      Config
	log      *slog.Logger
	limiters [8]limiter    // by limit.Algorithm (the gubernator pair share one table: gubernator.go)
	budget   *table.Budget // nil without Config.MaxMemory
	mv       *mover        // handoff, replication, snapshots, granted leases (mover.go)
	lh       *leaseHolder  // leases held here (leasehold.go); nil without Config.Leases
	view     atomic.Pointer[view]
	// rebuildMu serializes rebuilds (the membership watcher and Leave), so
	// that one which read leaving as false cannot store its ring after
	// Leave's and put this node back on it; versions are stored in order.
	rebuildMu sync.Mutex
	version   atomic.Uint64
	leaving   atomic.Bool
	noneLeft  sync.Once // NoteNoneLeft's line
	peers     peerSet
	m         *metrics
	keyBufs   sync.Pool // *keyBuf
	groups    groupLocks
	rings     ringsCache // the last answer of Rings

	// ho holds the handoff marks and the deciding lock (handoff.go): the
	// check path reads them, the mover changes them.
	ho     *handoff
	pushed []chan struct{} // the pushes of the last rebuild; guarded by rebuildMu
	// clustered: a ring with other members has been seen; guarded by rebuildMu.
	clustered bool
	// refutes is the gossip's DeathsRefuted at the last rebuild, rejoin
	// set when it rose since and no ring with others has taken this
	// node's partitions back yet (see rejoined); both guarded by rebuildMu.
	refutes uint64
	rejoin  bool
	// decidedAlone: a client batch was routed here while the ring held
	// this node alone, so its tables may hold state nobody else has.
	decidedAlone atomic.Bool
	// warnedUnjoined: the log said once that client checks came before the
	// node joined its seeds (route.go, fallbackUnjoined).
	warnedUnjoined atomic.Bool

	// Wake-ups, each cap 1, signalled without blocking, never closed: an
	// idle node runs no timer of its own (see sweepLoop, and the mover's
	// replicateLoop).
	keysWake  chan struct{} // a table went from empty to holding a key
	readyWake chan struct{} // Ready may have changed
}

// DefaultLeaseThreshold is Config.LeaseThreshold's default, in checks per
// second of one key.
const DefaultLeaseThreshold = 100

// New returns a node. It starts nothing.
func New(cfg Config) (*Node, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	n := &Node{cfg: cfg, log: cfg.Logger, keysWake: make(chan struct{}, 1), readyWake: make(chan struct{}, 1)}
	n.m = newMetrics(cfg.Registerer, n, cfg.MetricsMaxRules)
	n.mv = newMover(cfg, nodeHost{n}, n.log, n.m)
	if cfg.Leases {
		n.lh = newLeaseHolder(n, cfg.LeaseThreshold)
	}
	tc := table.Config{MaxKeys: cfg.MaxKeys, TrackChanges: cfg.ReplicationInterval > 0,
		OnFirstKey: func() { wake(n.keysWake) }, OnChange: func() { wake(n.mv.changesWake) }}
	if cfg.MaxMemory > 0 {
		n.budget = table.NewBudget(TableBudget(cfg.MaxMemory))
		tc.Budget = n.budget
	}
	gub := gubernator.NewTable(tc)
	n.limiters = [8]limiter{
		limit.TokenBucket:           bucket.NewTokenBucket(tc),
		limit.LeakyBucket:           bucket.NewLeakyBucket(tc),
		limit.FixedWindow:           window.NewFixed(tc),
		limit.SlidingWindow:         window.NewSliding(tc),
		limit.SlidingLog:            window.NewLog(tc),
		limit.GubernatorTokenBucket: gub,
		limit.GubernatorLeakyBucket: gub.Leaky(),
		limit.Cell:                  cell.NewTable(tc),
	}
	n.keyBufs.New = func() any { return &keyBuf{b: make([]byte, 0, 64), tally: n.m.rules.NewTally()} }
	n.groups.seed = maphash.MakeSeed()
	n.peers.dial, n.peers.backoff, n.peers.self = cfg.Peers, cfg.PeerBackoff, cfg.Name
	if n.peers.dial == nil {
		n.peers.dial = grpcDialer{cfg.Peer}
	}
	n.peers.log = n.log
	n.peers.standins = cfg.ReplicationInterval > 0
	// Suspensions measure real time: Config.Now is the clock of decisions,
	// which tests may hold still.
	n.peers.now = func() int64 { return time.Now().UnixNano() }
	self, err := ring.New([]ring.Member{n.selfMember()}, 0, cfg.Ring)
	if err != nil {
		return nil, err
	}
	n.ho = newHandoff(self.Partitions())
	if err := n.rebuild([]ring.Member{n.selfMember()}); err != nil {
		return nil, err
	}
	return n, nil
}

// withDefaults checks cfg and fills in the defaults of the fields left
// zero.
func (cfg Config) withDefaults() (Config, error) {
	if cfg.Name == "" {
		return cfg, errors.New("peer: node name is empty")
	}
	if int(cfg.FailPolicy) >= len(policyNames) {
		return cfg, errors.New("peer: unknown fail policy")
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
	if cfg.HandoffTimeout <= 0 {
		cfg.HandoffTimeout = 5 * time.Second
	}
	if cfg.LeaseThreshold <= 0 {
		cfg.LeaseThreshold = DefaultLeaseThreshold
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return cfg, nil
}

func (n *Node) selfMember() ring.Member {
	return ring.Member{Name: n.cfg.Name, Addr: n.cfg.GRPCAddr, PeerAddr: n.cfg.PeerAddr}
}

// peerAddr is the address other nodes reach m at: its PeerAddr, or Addr
// for a member that publishes none (a node of a version that served
// peers on its client port); empty when m is unknown.
func peerAddr(m ring.Member) string { return cmp.Or(m.PeerAddr, m.Addr) }

// Name returns the node's name.
func (n *Node) Name() string { return n.cfg.Name }

// Run serves gossip, rebuilds the ring on membership changes, sweeps idle
// keys and writes snapshots (Config.StateDir) until ctx is done, then
// writes a last snapshot and closes the peer clients. It returns
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
	wg.Go(func() { n.mv.run(ctx) })
	var err error
	select {
	case <-ctx.Done():
	case err = <-errc:
	}
	cancel()
	wg.Wait()
	// Last: the handoff of Leave is done and the caller has stopped its
	// servers, so the last snapshot holds everything decided here.
	n.mv.finish()
	if n.lh != nil {
		n.lh.wait()
	}
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
	v, err := n.newView(members)
	if err != nil {
		return err
	}
	snap := v.snap
	// The new ring and the handoff marks it implies appear together to
	// batches, which load both under deciding held for reading. Without
	// this, a batch that loaded the new ring before its gained partitions
	// were marked incoming decided their keys here from nothing while the
	// old owner's state was still on its way (seen: a forwarded check
	// admitted against a fresh key between the two).
	rejoin := n.rejoined(v)
	n.ho.deciding.Lock()
	old := n.view.Load()
	n.view.Store(v)
	restorePush := false
	var from *view
	if old != nil {
		from = old
		if old.snap.Len() == 1 && v.backup != nil && !n.clustered && !n.decidedAlone.Load() {
			// A node that was alone and has decided nothing on its own is
			// joining a cluster whose state is elsewhere: it takes its keys
			// from the ring the others had before it came. Keys it may
			// hold already do not count: they were pushed here, or
			// forwarded here, by members whose rings had it before its own
			// did (counting them once made a joining node that received an
			// early push skip its pulls, and the old owner decided on
			// while the new one started from nothing).
			from = &view{snap: v.backup, self: -1}
			// Keys restored from a snapshot that the others own go to
			// them all the same (restorePushes).
			restorePush = true
		}
		n.pushed = n.mv.planHandoff(from, v, rejoin)
	}
	n.ho.deciding.Unlock()
	if from != nil {
		n.mv.markReplicaMoves(from, v)
	}
	n.noteCluster(v, restorePush)
	// Changes are tracked only while there is someone to replicate to.
	track := n.cfg.ReplicationInterval > 0 && snap.Len() > 1
	for _, l := range n.limiters {
		l.TrackChanges(track)
	}
	n.peers.retain(snap.Members())
	if old != nil && gained(old.snap, snap) {
		n.peers.resume()
	}
	n.m.ringMembers.Set(float64(snap.Len()))
	n.m.ringRebuilds.Inc()
	n.log.Info("ring rebuilt", "version", snap.Version(), "members", snap.Len())
	wake(n.readyWake)
	return nil
}

// rejoined returns, when other members held this node dead since it
// last took its partitions back, the ring they decided in meanwhile (v's
// members but this node): the rebuild to v then takes this node's
// partitions from their owners there, as a join does. Otherwise it returns
// nil. A node that never noticed (a partition that healed before its own
// suspicions timed out, a pause longer than failure detection) has the
// same ring before and after, and without this went on deciding its keys
// from its own state while the others handed theirs back: both decided
// them until each push landed. Only a node already clustered: one that
// starts joins with that ring anyway. The others hold this node alive
// again, so the network to them is back, as when a ring gains a member:
// their forwarding suspensions are lifted here, before the pulls are
// planned (a suspension fails a pull at once). rebuildMu is held.
func (n *Node) rejoined(v *view) *view {
	if n.view.Load() == nil {
		return nil
	}
	if r, ok := n.cfg.Gossip.(deathRefuter); ok {
		if c := r.DeathsRefuted(); c != n.refutes {
			n.refutes, n.rejoin = c, n.clustered
		}
	}
	if !n.rejoin || v.backup == nil || n.leaving.Load() {
		return nil // alone for now: the next ring with others takes them
	}
	n.rejoin = false
	n.log.Warn("other members held this node dead and decided its keys: taking them back before deciding them", "ring_version", v.snap.Version())
	n.peers.resume()
	return &view{snap: v.backup, self: -1}
}

// noteCluster does what the snapshots need of a rebuild to v: the members
// of a ring this node decides in with others are recorded; at the
// first ring with other members, the partitions of members not back since
// a stop are counted (noteAbsentOwners), and restored keys others own are
// sent to them (restorePushes, when restorePush). rebuildMu is held.
func (n *Node) noteCluster(v *view, restorePush bool) {
	if v.snap.Len() <= 1 {
		return
	}
	if v.self >= 0 && !n.leaving.Load() && (n.cfg.Gossip == nil || n.cfg.Gossip.Joined()) {
		n.mv.dur.noteMembers(v.snap)
	}
	if !n.clustered {
		n.mv.noteAbsentOwners(v)
	}
	n.clustered = true
	if n.mv.takeRestored() && restorePush {
		n.mv.restorePushes(v)
	}
}

// gained reports whether cur has a member that old has not.
func gained(old, cur *ring.Snapshot) bool {
	for i := range cur.Len() {
		if old.IndexOf(cur.Member(i).Name) < 0 {
			return true
		}
	}
	return false
}

// newView builds the view of a ring of members, with the next version.
// While leaving, this node is left out, unless it is the only one.
func (n *Node) newView(members []ring.Member) (*view, error) {
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
		return nil, err
	}
	v := &view{snap: snap, self: snap.IndexOf(n.cfg.Name)}
	if v.self >= 0 && snap.Len() > 1 {
		if v.backup, err = snap.Without(n.cfg.Name); err != nil {
			return nil, err
		}
	}
	return v, nil
}

// wake signals ch (cap 1) without blocking: a pending signal covers this
// one too.
func wake(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// sweepLoop sweeps every SweepInterval while the tables hold keys, and
// sleeps while they are all empty: only a key can expire. The order rules
// out a lost wake-up: the loop reads the tables' sizes after it last took
// keysWake, and a table that gains its first key after that read signals
// keysWake afterwards (table.Config.OnFirstKey).
//
// While sweeps find nothing to remove in tables they cover whole (keys
// that are still in use: a long period, a steady load), the interval
// doubles after each, up to maxSweepBackoff × SweepInterval, so that a
// node holding keys does not visit them all every second for nothing;
// the first sweep that removes a key brings it back to SweepInterval. An
// idle key may so stay up to that longer before it is swept; the key cap
// and the byte budget bound the tables meanwhile, as always.
func (n *Node) sweepLoop(ctx context.Context) {
	every := n.cfg.SweepInterval
	t := time.NewTimer(every)
	defer t.Stop()
	for {
		if n.keys() == 0 {
			t.Stop()
			select {
			case <-ctx.Done():
				return
			case <-n.keysWake:
			}
			every = n.cfg.SweepInterval
			t.Reset(every)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			every = n.nextSweep(every, n.sweep())
			t.Reset(every)
		}
	}
}

// maxSweepBackoff bounds the sweep interval's growth while sweeps find
// nothing to remove (see sweepLoop): 32 s at the default SweepInterval.
const maxSweepBackoff = 32

// sweep sweeps every table once and reports whether it was quiet: it
// removed nothing and looked at every key (no table held more than
// SweepBudget).
func (n *Node) sweep() (quiet bool) {
	now := n.cfg.Now().UnixNano()
	removed, whole := 0, true
	for _, l := range n.limiters {
		whole = whole && l.Len() <= n.cfg.SweepBudget
		removed += l.Sweep(now, n.cfg.SweepBudget)
	}
	n.m.swept.Add(float64(removed))
	return removed == 0 && whole
}

// nextSweep is the interval after a sweep: doubled after a quiet one, up
// to maxSweepBackoff × SweepInterval, else SweepInterval.
func (n *Node) nextSweep(every time.Duration, quiet bool) time.Duration {
	if !quiet {
		return n.cfg.SweepInterval
	}
	return min(2*every, maxSweepBackoff*n.cfg.SweepInterval)
}

// keys returns the keys held in all tables.
func (n *Node) keys() int {
	k := 0
	for _, l := range n.limiters {
		k += l.Len()
	}
	return k
}

// Leave hands this node's keys to their new owners and announces that it
// is going. It returns once every new owner has taken its keys, or
// HandoffTimeout has passed (then it logs so and counts it). The node keeps
// answering (forwarding what it no longer holds) until the caller stops its
// servers; Run must still be running for the handoff to proceed.
// It logs what happened once: the keys handed off, or, when no other member
// is left to take them (a cluster of one, or a whole cluster stopped at
// once), how many keys this node drops. Idempotent.
func (n *Node) Leave() error {
	if n.leaving.Swap(true) {
		return nil
	}
	wake(n.readyWake)
	if n.lh != nil {
		// Before the handoff: the owners credit the releases while they
		// still decide the keys.
		n.lh.releaseAll()
	}
	g := n.cfg.Gossip
	if g == nil {
		return nil
	}
	start := time.Now()
	// The ring without this node first: its partitions are marked moved and
	// pushed at once, while gossip tells the others.
	err := n.rebuild(g.Members())
	n.rebuildMu.Lock()
	pushed := n.pushed
	n.rebuildMu.Unlock()
	if lerr := g.Leave(n.cfg.LeaveTimeout); lerr != nil && err == nil {
		err = lerr
	}
	deadline := time.NewTimer(n.cfg.HandoffTimeout)
	defer deadline.Stop()
	for i, ch := range pushed {
		select {
		case <-ch:
			continue
		case <-deadline.C:
		}
		if !n.OthersAlive() {
			break // nobody is left to take them: said below
		}
		n.m.handoffIncomplete.Inc()
		n.log.Warn("leave: handoff not acknowledged before the deadline; leaving anyway",
			"pending", len(pushed)-i, "of", len(pushed), "timeout", n.cfg.HandoffTimeout)
		return err
	}
	switch {
	case !n.OthersAlive():
		n.NoteNoneLeft()
	case len(pushed) > 0:
		n.log.Info("leave: keys handed off", "owners", len(pushed), "took", time.Since(start).Round(time.Microsecond))
	}
	return err
}

// NoteNoneLeft logs, once, that no other member is left to take this
// node's keys, and how many keys it holds: they go when it exits. Leave
// calls it when it finds no one; a caller that keeps the node answering
// after Leave (a drain) calls it when the others go meanwhile, as they do
// when a whole cluster is stopped at once.
func (n *Node) NoteNoneLeft() {
	n.noneLeft.Do(func() {
		n.log.Info("leave: no other member left to take the keys; "+strconv.Itoa(n.keyCount())+" keys "+n.mv.keptOrDropped(), n.mv.dur.attrs()...)
	})
}

// OthersAlive reports whether gossip knows a member other than this node.
func (n *Node) OthersAlive() bool {
	g := n.cfg.Gossip
	if g == nil {
		return false
	}
	for _, m := range g.Members() {
		if m.Name != n.cfg.Name {
			return true
		}
	}
	return false
}

// keyCount is the number of keys the tables hold.
func (n *Node) keyCount() int {
	total := 0
	for _, l := range n.limiters {
		total += l.Len()
	}
	return total
}

// ReadyChanged is signalled, without blocking and coalesced (capacity 1,
// never closed), each time Ready may have changed: after a ring rebuild
// (gossip signals a change once the node has joined) and when Leave
// starts. One receiver: receive, then call Ready.
func (n *Node) ReadyChanged() <-chan struct{} { return n.readyWake }

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
