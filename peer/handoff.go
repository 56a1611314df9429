package peer

import (
	"sync"
	"sync/atomic"

	"github.com/shardlimiter/shardlimiter/limit"
	"github.com/shardlimiter/shardlimiter/ring"
)

// Handoff: how a key's state follows the key when it changes owner.
//
// Keys change owner in whole ring partitions (ring.Snapshot.PartitionOf).
// Each node keeps a mark per partition, normal for almost all of them:
//
//	incoming  the ring says this node owns it, but its state is elsewhere:
//	          before deciding any key of it, the node pulls the partition
//	          (State.Pull) from the node that held it, or, when that one
//	          cannot be reached (it died), from the node that held its
//	          replica, and merges what it gets.
//	moved     this node has handed the partition to another node (it pushed
//	          it, or the other pulled it): checks of it go there, whatever
//	          this node's ring says, until the ring agrees.
//	received  another node handed the partition here although this node's
//	          ring does not (yet) say it owns it: it is decided here.
//
// At every ring rebuild the node compares each partition's new owner with the
// old one: a partition gained becomes incoming; one lost is marked moved and
// pushed to its new owner (State.Push). So whichever of the two nodes sees
// the change first starts the transfer, and the state crosses once (both
// directions merge, so crossing twice is harmless: see Limiter.Import).
//
// The invariant: at any time at most one node decides a partition, the one
// that holds its state. A node decides a key only if it owns the partition
// by its ring and has not moved it, or has received it. Handing a partition
// over (marking it moved) and exporting its keys happen in that order, with
// deciding taken for writing in between: every batch decides while holding
// deciding for reading and loads the marks and the ring inside it, so no
// decision made under the old marks lands after the export. For the same
// reason a rebuild stores the new ring and sets the marks it implies with
// deciding held for writing: a batch sees both or neither, never a ring
// that gives it a partition not yet marked incoming.
//
// Marks change only under mu; the check path reads a partition's kind from
// an atomic and, when no partition is marked (active is 0, the steady
// state), not even that.
type handoff struct {
	kinds  []atomic.Uint32 // by partition: partNormal, …
	active atomic.Int64    // partitions not normal
	// deciding is held for reading by a batch while it routes and decides
	// locally, and for writing for an instant by a handover.
	deciding sync.RWMutex

	mu    sync.Mutex
	parts []partDetail // by partition, guarded by mu
}

const (
	partNormal uint32 = iota
	partIncoming
	partMoved
	partReceived
)

var partKindNames = [...]string{"normal", "incoming", "moved", "received"}

// partDetail is what a mark needs beyond its kind. Guarded by handoff.mu.
type partDetail struct {
	// incoming: where the state is, and where its replica is (Name "" when
	// none, or when replicaHere: this node holds it), tried in that order;
	// done is closed once the state is here (or given up on).
	from, backup ring.Member
	replicaHere  bool
	done         chan struct{}
	// moved: the node that has it; pushed is closed once our push of it
	// was answered (at once when it was pulled from us).
	to     ring.Member
	pushed chan struct{}
	why    limit.Transfer
}

func newHandoff(partitions int) *handoff {
	return &handoff{kinds: make([]atomic.Uint32, partitions), parts: make([]partDetail, partitions)}
}

// drain waits until every batch deciding under the marks as they were
// before the caller changed them has finished: those hold deciding for
// reading, and batches that take it from now on see the new marks.
func (h *handoff) drain() {
	h.deciding.Lock()
	//lint:ignore SA2001 an empty critical section is the point: it waits for the readers
	h.deciding.Unlock()
}

// busy reports whether any partition is marked.
func (h *handoff) busy() bool { return h.active.Load() != 0 }

func (h *handoff) kind(p int) uint32 { return h.kinds[p].Load() }

// setLocked changes p's kind and detail. Leaving incoming closes done, so
// that waiters look again.
func (h *handoff) setLocked(p int, kind uint32, d partDetail) {
	old := h.kinds[p].Load()
	if old == partIncoming && h.parts[p].done != nil && d.done != h.parts[p].done {
		close(h.parts[p].done)
	}
	switch {
	case old == partNormal && kind != partNormal:
		h.active.Add(1)
	case old != partNormal && kind == partNormal:
		h.active.Add(-1)
	}
	h.parts[p] = d
	h.kinds[p].Store(kind)
}

// movedByLocked reports whether p is marked moved by the push whose
// channel is pushed (and not since by another). h.mu is held.
func (h *handoff) movedByLocked(p int, pushed chan struct{}) bool {
	return h.kinds[p].Load() == partMoved && h.parts[p].pushed == pushed
}

// target returns where a moved partition went, and the channel closed once
// our push of it was answered.
func (h *handoff) target(p int) (ring.Member, chan struct{}, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.kinds[p].Load() != partMoved {
		return ring.Member{}, nil, false
	}
	return h.parts[p].to, h.parts[p].pushed, true
}

// waitFor returns the channels to wait on before the incoming partitions
// among ps are settled; nil when none is.
func (h *handoff) waitFor(ps []int) []chan struct{} {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []chan struct{}
	for _, p := range ps {
		if h.kinds[p].Load() == partIncoming {
			out = append(out, h.parts[p].done)
		}
	}
	return out
}

// settle ends the incoming mark of each of ps (their state has arrived, or
// has been given up on).
func (h *handoff) settle(ps []int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, p := range ps {
		if h.kinds[p].Load() == partIncoming {
			h.setLocked(p, partNormal, partDetail{})
		}
	}
}

// counts returns how many partitions have each kind, for /v1/cluster.
func (h *handoff) counts() map[string]int {
	out := map[string]int{}
	if !h.busy() {
		return out
	}
	for p := range h.kinds {
		if k := h.kinds[p].Load(); k != partNormal {
			out[partKindNames[k]]++
		}
	}
	return out
}

// answered reports whether pushed, a moved mark's channel, is closed: its
// push was answered (nil: there is none under way).
func answered(pushed chan struct{}) bool {
	if pushed == nil {
		return true
	}
	select {
	case <-pushed:
		return true
	default:
		return false
	}
}

// closedChan is an already closed channel: a moved mark whose transfer is
// complete.
var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()
