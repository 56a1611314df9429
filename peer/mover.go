package peer

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/shardlimiter/shardlimiter/limit"
	"github.com/shardlimiter/shardlimiter/peer/replicamove"
	"github.com/shardlimiter/shardlimiter/ring"
)

// The state mover: everything that moves key states between this node, the
// other nodes and the disk, so that a key's count follows the key.
//
//   - handoff (transfer.go): the transfers a ring rebuild plans, pulls of
//     the partitions gained and pushes of those lost, and the State service
//     other nodes call (Push, Pull);
//   - replication (replicate.go): changed keys to the node that holds their
//     replica, every Config.ReplicationInterval, and every key of a
//     partition whose replica holder a rebuild moved (replicamove.go);
//   - snapshots (durable.go): the node's keys to its snapshot file, and
//     back at start.
//
// The mover owns its jobs: the transfers queued and running, the
// replication loop and the snapshot loop, all started by run. It sees the
// node only through moverHost, which it defines: the ring the node routes
// by, the handoff marks and the deciding lock (handoff.go), the tables,
// the members, and the links to the peers. The node calls the mover at a
// rebuild (planHandoff, markReplicaMoves, restorePushes), when a check
// follows a redirect to itself (takeOver), and serves its State calls
// through it.
//
// Leases (lease.go): a share of a hot key's capacity granted to another
// decider is a debit of the owner's state, and travels with the key's
// state through the same handoff, replication and snapshots; the mover
// serves the Lease calls and keeps the book of its grants.
type mover struct {
	cfg  Config
	host moverHost
	log  *slog.Logger
	m    *metrics
	dur  *durable // nil without Config.StateDir

	// The handoff's transfers (transfer.go): planned by rebuilds, run by
	// handoffLoop, each in a goroutine of its own.
	jobsMu      sync.Mutex
	jobs        []job         // planned, not yet started; guarded by jobsMu
	jobsKick    chan struct{} // cap 1: jobs has work
	jobsWG      sync.WaitGroup
	jobsRunning atomic.Int64

	// changesWake is signalled (cap 1, without blocking, never closed)
	// when a table queues a changed key: it wakes the replication loop of
	// an idle node (replicate.go).
	changesWake chan struct{}
	// moves: the partitions whose replica holder a rebuild moved, for the
	// next replication round to send whole (replicamove.go).
	moves replicamove.Marks

	// leases is the book of the grants this node made (lease.go). Their
	// debits are in the keys' states, which the jobs above move.
	leases *leaseBook
	// noGrants holds, per partition, until when nothing of it is granted
	// (holdGrants); guarded by noGrantsMu.
	noGrantsMu sync.Mutex
	noGrants   map[int]int64

	// pulls orders the pulls answered here: pulled[p] is the value pullSeq
	// had when a node last pulled partition p from this node (takeOver);
	// guarded by pulledMu.
	pullSeq  atomic.Uint64
	pulledMu sync.Mutex
	pulled   map[int]uint64
}

// moverHost is what the state mover needs of its node. The node's
// implementation is nodeHost. Every method is safe for concurrent use and
// returns without blocking on another node.
type moverHost interface {
	// ringView returns the ring snapshot the node routes by now.
	ringView() *view
	// marks returns the node's handoff marks and its deciding lock: the
	// mover changes marks under marks().mu and takes deciding for writing
	// (drain) between marking a partition moved and exporting its keys.
	marks() *handoff
	// tables returns the node's tables, by limit.Algorithm.
	tables() []limiter
	// member returns the member called name as the node knows it: from
	// its ring, else from gossip; its addresses are empty when unknown.
	member(name string) ring.Member
	// gossipMembers returns the members gossip knows now (the ring's
	// members for a node without gossip).
	gossipMembers() []ring.Member
	// leaving reports whether the node has begun to leave.
	leaving() bool
	// othersAlive reports whether gossip knows a member other than this
	// node.
	othersAlive() bool
	// link returns the link to m (links.go).
	link(m ring.Member) (Link, error)
	// reachable reports whether m is not suspended after a failed forward.
	reachable(m ring.Member) bool
	// decider returns "" when this node decides the key with unique key
	// uk by the ring v and the handoff marks, else the node it takes for
	// the key's owner. The caller holds deciding for reading.
	decider(v *view, uk string) string
}

func newMover(cfg Config, host moverHost, log *slog.Logger, m *metrics) *mover {
	return &mover{cfg: cfg, host: host, log: log, m: m, dur: newDurable(cfg), leases: newLeaseBook(), pulled: map[int]uint64{},
		jobsKick: make(chan struct{}, 1), changesWake: make(chan struct{}, 1)}
}

// run runs the mover's jobs until ctx is done: the handoff's transfers,
// replication and snapshots. It returns once all of them have returned;
// the caller writes the last snapshot (finish) when nothing else runs.
func (mv *mover) run(ctx context.Context) {
	var wg sync.WaitGroup
	wg.Go(func() { mv.handoffLoop(ctx) })
	wg.Go(func() { mv.replicateLoop(ctx) })
	if mv.dur != nil {
		wg.Go(func() { mv.snapshotLoop(ctx) })
	}
	wg.Wait()
}

// finish writes the last snapshot (Config.StateDir), once run has
// returned and the node's servers have stopped: it holds everything
// decided here.
func (mv *mover) finish() {
	if mv.dur != nil {
		mv.writeFinalSnapshot()
	}
}

// changed notes that the tables changed: the next snapshot is written.
// Called on the check path: a load, rarely a store.
func (mv *mover) changed() { mv.dur.changed() }

// kick wakes handoffLoop: jobs were queued.
func (mv *mover) kick() { wake(mv.jobsKick) }

// queue appends the jobs of each set for handoffLoop and wakes it. It
// returns the channels closed once each push of a partition (not keysOnly)
// has been answered.
func (mv *mover) queue(sets ...map[string]*job) (pushed []chan struct{}) {
	mv.jobsMu.Lock()
	for _, jobs := range sets {
		for _, j := range jobs {
			mv.jobs = append(mv.jobs, *j)
			if !j.pull && !j.keysOnly {
				pushed = append(pushed, j.pushed)
			}
		}
	}
	mv.jobsMu.Unlock()
	mv.kick()
	return pushed
}

// The node's State service (peers.StateService), served by its mover.

// Push merges key states sent by another node (transfer.go, mover.push).
func (n *Node) Push(ctx context.Context, from string, why limit.Transfer, partitions []int, keys []limit.KeyState) error {
	return n.mv.push(ctx, from, why, partitions, keys)
}

// Pull hands partitions over to the node from (transfer.go, mover.pull).
func (n *Node) Pull(ctx context.Context, r limit.PullRequest) ([]limit.KeyState, error) {
	return n.mv.pull(ctx, r)
}

// Restore merges this node's snapshot from Config.StateDir into its tables
// (durable.go, mover.restore). Call it once, after New and before the node
// serves; it does nothing without a StateDir. A missing file is a first
// start; a damaged one is logged, counted, renamed to <file>.corrupt and
// otherwise ignored. The error is for a directory that cannot be made or
// read.
func (n *Node) Restore() error { return n.mv.restore() }

// nodeHost is the node as its mover's moverHost.
type nodeHost struct{ n *Node }

func (h nodeHost) ringView() *view                  { return h.n.view.Load() }
func (h nodeHost) marks() *handoff                  { return h.n.ho }
func (h nodeHost) tables() []limiter                { return h.n.limiters[:] }
func (h nodeHost) member(name string) ring.Member   { return h.n.member(name) }
func (h nodeHost) leaving() bool                    { return h.n.leaving.Load() }
func (h nodeHost) othersAlive() bool                { return h.n.OthersAlive() }
func (h nodeHost) link(m ring.Member) (Link, error) { return h.n.peers.link(m) }
func (h nodeHost) reachable(m ring.Member) bool     { return h.n.peers.allowed(m) }

func (h nodeHost) decider(v *view, uk string) string {
	owner, _, _ := h.n.forwardedOwner(v, uk, h.n.ho.busy())
	return owner
}

func (h nodeHost) gossipMembers() []ring.Member {
	if g := h.n.cfg.Gossip; g != nil {
		return g.Members()
	}
	return h.n.view.Load().snap.Members()
}
