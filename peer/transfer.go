package peer

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/shardlimiter/shardlimiter/limit"
	"github.com/shardlimiter/shardlimiter/peer/leasing"
	"github.com/shardlimiter/shardlimiter/ring"
	"github.com/shardlimiter/shardlimiter/transport"
)

// The moving of key states between nodes: the jobs a ring rebuild plans
// (see handoff.go), and the State service other nodes call.

// A transfer is split into Push calls of at most maxTransferKeys keys and
// about maxTransferBytes (under gRPC's default 4 MiB receive limit), and
// into Pull calls of at most maxPullPartitions partitions (at the default
// 4093 partitions and 1M keys, ~250 keys each).
const (
	maxTransferKeys   = 8192
	maxTransferBytes  = 2 << 20
	maxPullPartitions = 256
)

// pullTimeoutGone bounds a pull from a node that is no longer a member: a
// node that is leaving gracefully answers (it waits for its keys to be
// taken), a crashed one never does, and its replica is the next place to
// look. It must cover the waits of Pull (pullWaitOwn, memberWait) in the
// common case.
const pullTimeoutGone = 500 * time.Millisecond

// transferRetries is how often a failed push is tried again before the
// transfer is given up (and counted).
const transferRetries = 3

// job is a transfer planned by a rebuild, run by the handoff goroutines.
type job struct {
	pull         bool
	peer, backup ring.Member // pull: from peer, else from backup; push: to peer
	// replicaHere: pull: the replica of parts is held by this node (its
	// old owner replicated to it), so a failed pull falls back to it.
	replicaHere bool
	parts       []int
	why         limit.Transfer
	pushed      chan struct{} // push: closed when answered
	// keysOnly: a push of keys held here that hands over no partition
	// (restorePushes): the receiver merges them and marks nothing.
	keysOnly bool
}

// planHandoff marks the partitions whose owner changed from old to cur and
// queues the transfers (see handoff.go); with rejoin, the partitions cur
// gives this node are taken from their owners in rejoin instead (the ring
// the others decided in while they held this node dead, Node.rejoined).
// It runs under rebuildMu, once per rebuild, after cur is stored. It returns the channels closed once each
// push has been answered.
func (mv *mover) planHandoff(old, cur, rejoin *view) []chan struct{} {
	pl := handoffPlan{old: old, why: limit.Join,
		pulls: map[string]*job{}, pushes: map[string]*job{}}
	if cur.snap.Len() < old.snap.Len() {
		pl.why = limit.Leave
	}
	own := pl // the partitions cur gives this node, from rejoin if set
	if rejoin != nil {
		own.old = rejoin
	}
	leaving := mv.host.leaving()
	h := mv.host.marks()
	h.mu.Lock()
	for p := range h.kinds {
		was := old.snap.Member(old.snap.PartitionOwner(p))
		now := cur.snap.Member(cur.snap.PartitionOwner(p))
		switch {
		case now.Name == mv.cfg.Name && leaving:
			// A leaving node is on its ring again only when every other
			// member has gone too: it takes nothing over (the others are
			// leaving as well, and their pulls would only time out), and
			// decides from what it holds until it exits.
			if kind := h.kinds[p].Load(); kind == partMoved || kind == partReceived {
				h.setLocked(p, partNormal, partDetail{})
			}
		case now.Name == mv.cfg.Name:
			if rejoin != nil { // the others decided it in their ring without this node
				was = rejoin.snap.Member(rejoin.snap.PartitionOwner(p))
			}
			mv.planOwnLocked(h, &own, p, was)
		default:
			mv.planOthersLocked(h, &pl, p, was, now)
		}
	}
	h.mu.Unlock()
	if len(pl.pulls)+len(pl.pushes) == 0 {
		return nil
	}
	mv.log.Info("handoff planned", "ring_version", cur.snap.Version(), "pulls", len(pl.pulls), "pushes", len(pl.pushes), "transfer", pl.why.String(), "leaving", leaving)
	return mv.queue(pl.pulls, pl.pushes)
}

// handoffPlan is what planHandoff gathers over the partitions.
type handoffPlan struct {
	old           *view
	why           limit.Transfer
	pulls, pushes map[string]*job // by source (pulls) and destination (pushes)
}

// planOwnLocked marks partition p, which the new ring gives this node
// (was, its owner in the old ring), and plans its pull. h.mu is held.
func (mv *mover) planOwnLocked(h *handoff, pl *handoffPlan, p int, was ring.Member) {
	kind, d := h.kinds[p].Load(), h.parts[p]
	switch {
	case kind == partMoved:
		h.setLocked(p, partIncoming, partDetail{from: d.to, done: make(chan struct{}), why: pl.why})
	case kind == partIncoming:
		// Still on its way from where the last change said.
	case was.Name != mv.cfg.Name:
		// Gained: take its state from the old owner, even when some
		// of it was received already (merging is idempotent, and
		// the old owner may have decided more since).
		backup, here := mv.backupOf(pl.old, was.Name, p)
		h.setLocked(p, partIncoming, partDetail{from: was, backup: backup, replicaHere: here, done: make(chan struct{}), why: pl.why})
	case kind == partReceived:
		h.setLocked(p, partNormal, partDetail{})
	default:
		return
	}
	if kind := h.kinds[p].Load(); kind == partIncoming {
		d := h.parts[p]
		key := d.from.Name + "\x00" + d.backup.Name + "\x00" + strconv.FormatBool(d.replicaHere)
		addPart(pl.pulls, key, job{pull: true, peer: d.from, backup: d.backup, replicaHere: d.replicaHere, why: pl.why}, p)
	}
}

// planOthersLocked marks partition p, which the new ring gives now, another
// node (was, its owner in the old ring), and plans its push. h.mu is held.
func (mv *mover) planOthersLocked(h *handoff, pl *handoffPlan, p int, was, now ring.Member) {
	switch kind := h.kinds[p].Load(); {
	case kind == partReceived, kind == partNormal && was.Name == mv.cfg.Name:
		j := addPart(pl.pushes, now.Name, job{peer: now, why: pl.why, pushed: make(chan struct{})}, p)
		h.setLocked(p, partMoved, partDetail{to: now, pushed: j.pushed, why: pl.why})
	case kind == partMoved && (h.parts[p].to.Name != now.Name || answered(h.parts[p].pushed)):
		// The ring agrees now, or the node we moved it to hands it on by
		// its own ring. While our push to the node the ring agrees on is
		// under way, the mark stays (pushDone ends it): checks of it are
		// named there only once the push has landed. Ended here, the
		// second rebuild of a leave (gossip's news of it) named the new
		// owner at once, before it held the state, and the sender,
		// bounced between the two rings, decided by its fail policy.
		h.setLocked(p, partNormal, partDetail{})
	}
	// An incoming partition lost before its state arrived stays
	// incoming: the pull under way passes it on (runPull), and a pull
	// from its new owner waits for it (Pull).
}

func addPart(jobs map[string]*job, key string, j job, p int) *job {
	if jobs[key] == nil {
		jobs[key] = &j
	}
	jobs[key].parts = append(jobs[key].parts, p)
	return jobs[key]
}

// backupOf returns the member that held the replica of partition p while
// owner owned it (the owner of p once owner is gone). It returns a zero
// Member when there is none, or when that is this node: then here is true
// (it has the replica already).
func (mv *mover) backupOf(old *view, owner string, p int) (m ring.Member, here bool) {
	w := old.without(owner) // cached in the view: markReplicaMoves asks for the same rings
	if w == nil {
		return ring.Member{}, false
	}
	m = w.Member(w.PartitionOwner(p))
	if m.Name == mv.cfg.Name {
		return ring.Member{}, true
	}
	return m, false
}

// handoffLoop runs the queued transfers, each in its own goroutine, until
// ctx is done; it returns once they have all returned.
func (mv *mover) handoffLoop(ctx context.Context) {
	defer mv.jobsWG.Wait()
	for {
		select {
		case <-ctx.Done():
			return
		case <-mv.jobsKick:
		}
		mv.jobsMu.Lock()
		jobs := mv.jobs
		mv.jobs = nil
		// Counted running as they leave the queue, under jobsMu: a job is
		// always queued or running to handoffIdle.
		mv.jobsRunning.Add(int64(len(jobs)))
		mv.jobsMu.Unlock()
		for _, j := range jobs {
			mv.jobsWG.Go(func() {
				defer mv.jobsRunning.Add(-1)
				if j.pull {
					mv.runPull(ctx, j)
				} else {
					mv.runPush(ctx, j)
				}
			})
		}
	}
}

// takeOver makes this node the holder of the partitions of checks[idx]
// when prev, the node its ring names as their owner, says they are this
// node's (prev's ring is ahead, and it is handing them over): it pulls them
// from prev, merges them and marks them received, so they are decided here
// on their state until this node's ring agrees.
func (mv *mover) takeOver(ctx context.Context, prev ring.Member, checks []limit.Check, idx []int) {
	v := mv.host.ringView()
	var parts []int
	for _, i := range idx {
		p := v.snap.PartitionOf(checks[i].Key)
		if mv.host.marks().kind(p) != partReceived && v.snap.PartitionOwner(p) != v.self && !slices.Contains(parts, p) {
			parts = append(parts, p)
		}
	}
	if len(parts) == 0 {
		return
	}
	start := mv.pullSeq.Load()
	keys, err := mv.pullFrom(ctx, prev, parts)
	if err != nil {
		mv.m.handoffIncomplete.Inc()
		mv.log.Warn("handoff: taking over partitions failed; deciding from the state held here", "from", prev.Name, "partitions", len(parts), "err", err)
		return
	}
	mv.importKeys(keys, limit.Leave)
	h := mv.host.marks()
	h.mu.Lock()
	defer h.mu.Unlock()
	v = mv.host.ringView()
	for _, p := range parts {
		if mv.pulledSince(p, start) {
			// prev (or another node) pulled it from here while our pull was
			// under way: prev's ring caught up and it took the partition
			// back, finding it unmarked here. Marked received now, it
			// would be decided here and there until the next ring change
			// (seen in loadtest --mode nemesis --seed 42, 3 nodes: two
			// partitions for 20 s, 98 to 157 hits over per key).
			continue
		}
		k := h.kinds[p].Load()
		if (k == partNormal || k == partMoved && h.parts[p].to.Name == prev.Name) && v.snap.PartitionOwner(p) != v.self {
			h.setLocked(p, partReceived, partDetail{from: prev, why: limit.Leave})
		}
	}
}

// notePulled records that a node is pulling partitions ps from this one
// (mover.pull, before it marks or exports anything).
func (mv *mover) notePulled(ps []int) {
	mv.pulledMu.Lock()
	defer mv.pulledMu.Unlock()
	for _, p := range ps {
		mv.pulled[p] = mv.pullSeq.Add(1)
	}
}

// pulledSince reports whether a node pulled partition p from this one
// after pullSeq was start.
func (mv *mover) pulledSince(p int, start uint64) bool {
	mv.pulledMu.Lock()
	defer mv.pulledMu.Unlock()
	return mv.pulled[p] > start
}

// handoffIdle reports whether no transfer is queued or running and no
// partition awaits its state. It reads them with deciding held for
// reading, as a batch does: a rebuild stores its ring and plans the
// transfers it implies with deciding held for writing, so a caller that
// has seen the new ring never sees it before its transfers (without this,
// a test that waited for the new ring and then for an idle handoff could
// find both between the two, and read the handoff's counters before it
// ran).
func (mv *mover) handoffIdle() bool {
	h := mv.host.marks()
	h.deciding.RLock()
	defer h.deciding.RUnlock()
	mv.jobsMu.Lock()
	queued := len(mv.jobs)
	mv.jobsMu.Unlock()
	return queued == 0 && mv.jobsRunning.Load() == 0 && h.counts()["incoming"] == 0
}

// runPull takes the state of j.parts from j.peer (or, failing that, from
// their replica), merges it here and settles the partitions. A partition
// that is no longer this node's by now (the ring moved on while the pull
// was under way, or another node took it) is passed on to where it is.
//
// A pull that falls back to the replica is not a lost handoff, and is
// counted apart from one (replicaFallbacks, not handoffIncomplete), logged
// at info: it is what a crash of the old owner looks like. "The replica"
// means, honestly, this much: replication is on, and the replica holder
// of the old ring (the owner of the partitions in that ring without the
// old owner) answered the pull, or is this node. What it holds is what
// the old owner replicated to it, which lags the old owner by at most
// one --replication-interval, plus the keys of a round the old owner
// could not send (counted on the old owner in
// shardlimiter_replication_errors_total and _dropped_keys_total, each
// with an alert of its own). A key the old owner last changed before a
// membership change made this holder its replica holder is there too: the
// old owner sent every key of such a partition in its first replication
// round after that rebuild (replicamove.go), up to maxReplicaKeys a round.
// What remains is the old owner dying within that round, or before its
// ring saw the change (docs/OPERATIONS.md, ShardlimiterHandoffFromReplica).
// Without
// replication there is no replica to fall back to: the replica holder
// holds nothing of the old owner's, and the pull is incomplete.
func (mv *mover) runPull(ctx context.Context, j job) {
	defer mv.host.marks().settle(j.parts)
	// A node that is leaving decides little more, and the node it pulls
	// from is most likely stopping too (a whole cluster stopped while a
	// join's pulls were under way): its failed pulls are no warning. It
	// may have begun to leave while the pull was under way, so this is
	// asked when a pull fails, not when it starts.
	warn := func(msg string, args ...any) {
		if mv.host.leaving() {
			mv.log.Debug(msg, args...)
		} else {
			mv.log.Warn(msg, args...)
		}
	}
	keys, err := mv.pullFrom(ctx, j.peer, j.parts)
	if err == nil {
		mv.importKeys(keys, j.why)
		mv.passOn(ctx, j.parts, j.why)
		return
	}
	replicated := mv.cfg.ReplicationInterval > 0
	switch {
	case replicated && j.replicaHere:
		mv.m.replicaFallbacks.Inc()
		mv.log.Info("handoff: old owner did not answer; deciding from its replica held here (at most one replication interval behind)",
			"from", j.peer.Name, "partitions", len(j.parts), "replication_interval", mv.cfg.ReplicationInterval, "err", err)
	case replicated && j.backup.Name != "":
		mv.log.Debug("handoff: pull failed, trying the replica", "from", j.peer.Name, "replica", j.backup.Name, "partitions", len(j.parts), "err", err)
		var rerr error
		if keys, rerr = mv.pullFrom(ctx, j.backup, j.parts); rerr == nil {
			mv.m.replicaFallbacks.Inc()
			mv.log.Info("handoff: old owner did not answer; took its replica from the replica holder (at most one replication interval behind)",
				"from", j.peer.Name, "replica", j.backup.Name, "partitions", len(j.parts), "keys", len(keys), "replication_interval", mv.cfg.ReplicationInterval, "err", err)
			mv.importKeys(keys, j.why)
			break
		}
		mv.m.handoffIncomplete.Inc()
		warn("handoff: pull failed, and from the replica holder too; deciding from the state held here",
			"from", j.peer.Name, "replica", j.backup.Name, "partitions", len(j.parts), "err", err, "replica_err", rerr)
	default:
		mv.m.handoffIncomplete.Inc()
		why := "no replica (replication is off)"
		if replicated {
			why = "no replica holder"
		}
		warn("handoff: pull failed; deciding from the state held here", "from", j.peer.Name, "partitions", len(j.parts), "replica", why, "err", err)
	}
	mv.passOn(ctx, j.parts, j.why)
}

// passOn pushes the partitions among parts that were incoming here but are
// now another node's, by the ring or by a move, to that node.
func (mv *mover) passOn(ctx context.Context, parts []int, why limit.Transfer) {
	jobs := map[string]*job{}
	h := mv.host.marks()
	h.mu.Lock()
	v := mv.host.ringView()
	for _, p := range parts {
		var to ring.Member
		switch h.kinds[p].Load() {
		case partMoved:
			to = h.parts[p].to
		case partIncoming:
			if o := v.snap.PartitionOwner(p); o != v.self {
				to = v.snap.Member(o)
			}
		}
		if to.Name == "" {
			continue
		}
		j := addPart(jobs, to.Name, job{peer: to, why: why, pushed: make(chan struct{})}, p)
		h.setLocked(p, partMoved, partDetail{to: to, pushed: j.pushed, why: why})
	}
	h.mu.Unlock()
	for _, j := range jobs {
		mv.runPush(ctx, *j)
	}
}

// pullFrom pulls parts from m. A node that restarted meanwhile has a new
// address, and the client for the old one is closed by the rebuild that
// saw it: the pull is tried once more at the address known now.
func (mv *mover) pullFrom(ctx context.Context, m ring.Member, parts []int) ([]limit.KeyState, error) {
	keys, err := mv.pullOnce(ctx, m, parts)
	if err == nil || ctx.Err() != nil {
		return keys, err
	}
	if errors.Is(err, transport.ErrTimeout) || errors.Is(err, errSuspended) {
		return nil, err // it would time out again
	}
	if now := mv.host.member(m.Name); peerAddr(now) != "" {
		m = now
	}
	return mv.pullOnce(ctx, m, parts)
}

func (mv *mover) pullOnce(ctx context.Context, m ring.Member, parts []int) ([]limit.KeyState, error) {
	if !mv.host.reachable(m) {
		return nil, errSuspended
	}
	sc, err := mv.host.link(m)
	if err != nil {
		return nil, err
	}
	if !mv.isMember(m.Name) {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, pullTimeoutGone)
		defer cancel()
	}
	var out []limit.KeyState
	for len(parts) > 0 {
		chunk := parts[:min(len(parts), maxPullPartitions)]
		parts = parts[len(chunk):]
		keys, err := sc.Pull(ctx, mv.pullRequest(chunk))
		if err != nil {
			return nil, err
		}
		out = append(out, keys...)
	}
	return out, nil
}

// runPush hands j.parts to j.peer. The partitions are already marked moved,
// so no new decision is made on them here; the batches deciding under the
// old marks are waited for before the keys are exported.
func (mv *mover) runPush(ctx context.Context, j job) {
	defer mv.pushDone(j)
	mv.host.marks().drain()
	keys := mv.exportPartitions(j.parts)
	parts := j.parts
	if j.keysOnly {
		if len(keys) == 0 {
			return
		}
		parts = nil
	}
	var err error
	for try := range transferRetries {
		if !j.keysOnly {
			if parts = mv.stillMoved(j, parts); len(parts) == 0 {
				mv.log.Debug("handoff: push dropped; a rebuild took its partitions back", "to", j.peer.Name, "try", try+1)
				return
			}
		}
		if err = mv.pushTo(ctx, j.peer, j.why, parts, keys); err == nil || ctx.Err() != nil {
			break
		}
		mv.log.Debug("handoff: push failed, retrying", "to", j.peer.Name, "try", try+1, "err", err)
		if !waitShed(ctx, err) {
			break
		}
	}
	if err == nil && !j.keysOnly && !mv.host.leaving() {
		// A leaving node takes nothing back (planHandoff).
		mv.reclaimTakenBack(ctx, j, parts)
	}
	if err != nil {
		if mv.host.leaving() && !mv.host.othersAlive() {
			// A whole cluster stopping: the receiver has gone too, and no
			// member is left to decide these keys; nothing is decided
			// without them meanwhile. Leave (NoteNoneLeft) says what
			// becomes of them: kept in the snapshot, or dropped.
			mv.log.Info("handoff: push failed; no other member is left to take the keys, "+mv.keptOrDropped(), "to", j.peer.Name, "partitions", len(j.parts), "keys", len(keys), "err", err)
			return
		}
		mv.m.handoffIncomplete.Inc()
		if mv.host.leaving() && !mv.gossipKnows(j.peer.Name) {
			// The receiver left while this node was leaving too (a stop of
			// several nodes at once): what it did not take is still here
			// and goes with this node. Counted, since a member that stays
			// may own it now; not a warning of its own, since Leave says
			// what becomes of the keys.
			mv.log.Info("handoff: push failed; the receiver left too, "+mv.keptOrDropped(), "to", j.peer.Name, "partitions", len(j.parts), "keys", len(keys), "err", err)
			return
		}
		mv.log.Warn("handoff: push failed", "to", j.peer.Name, "partitions", len(j.parts), "keys", len(keys), "err", err)
		return
	}
	mv.log.Debug("handoff: pushed", "to", j.peer.Name, "partitions", len(j.parts), "keys", len(keys))
}

// stillMoved returns the partitions of parts that are still marked moved by
// j, the push about to be sent. A push hands its partitions over: the
// receiver decides them from then on, until its ring agrees, when its ring
// gives them to this node (mover.push). Between the rebuild that planned j
// and a try of it (a retry comes seconds later when the receiver was out of
// reach), another rebuild may have given a partition back to this node
// (the mark is incoming, or normal again): handed over then, the receiver
// and this node would both decide it until the next ring change. Seen in
// loadtest --mode nemesis --seed 30 (5 nodes, --fault-gap 8s): a push
// planned during a one-way cut landed on retry after the rings had healed,
// and two nodes decided 14 partitions for 18 s, 28 to 58 hits over per
// key. Their keys still go (the receiver merges them; merging is harmless).
// A partition taken back while a try is under way is reclaimTakenBack's.
// Not covered: a try that failed here (timed out) but landed at the
// receiver later, after this node took the partition back.
func (mv *mover) stillMoved(j job, parts []int) []int {
	h := mv.host.marks()
	h.mu.Lock()
	defer h.mu.Unlock()
	kept := make([]int, 0, len(parts))
	for _, p := range parts {
		if h.movedByLocked(p, j.pushed) {
			kept = append(kept, p)
		}
	}
	return kept
}

// reclaimTakenBack closes the race stillMoved leaves: the partitions of
// sent, handed over by j's last try, that a rebuild gave back to this node
// while it was under way are pulled back from the receiver. Its pull of
// them may have come before the push, which then marked them received
// there; pulled again, the receiver marks them moved here (mover.pull).
// Merging the keys twice is harmless.
func (mv *mover) reclaimTakenBack(ctx context.Context, j job, sent []int) {
	var back []int
	h := mv.host.marks()
	h.mu.Lock()
	v := mv.host.ringView()
	for _, p := range sent {
		if !h.movedByLocked(p, j.pushed) && v.snap.PartitionOwner(p) == v.self {
			back = append(back, p)
		}
	}
	h.mu.Unlock()
	if len(back) == 0 {
		return
	}
	keys, err := mv.pullFrom(ctx, j.peer, back)
	if err != nil {
		mv.m.handoffIncomplete.Inc()
		mv.log.Warn("handoff: partitions taken back while their push was under way could not be pulled back; the receiver may decide them too until the next ring change",
			"from", j.peer.Name, "partitions", len(back), "err", err)
		return
	}
	mv.importKeys(keys, j.why)
	mv.log.Debug("handoff: pulled back partitions taken back during their push", "from", j.peer.Name, "partitions", len(back))
}

// gossipKnows reports whether gossip lists name as a member.
func (mv *mover) gossipKnows(name string) bool {
	return slices.ContainsFunc(mv.host.gossipMembers(), func(m ring.Member) bool { return m.Name == name })
}

// pushDone closes j.pushed and ends the moved marks of j's partitions that
// the ring gives to where they went: routing by ring is the same from now
// on, and the receiver holds the state.
func (mv *mover) pushDone(j job) {
	close(j.pushed)
	v := mv.host.ringView()
	h := mv.host.marks()
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, p := range j.parts {
		if h.movedByLocked(p, j.pushed) && v.snap.Member(v.snap.PartitionOwner(p)).Name == j.peer.Name {
			h.setLocked(p, partNormal, partDetail{})
		}
	}
}

// pushTo sends keys to m in calls of at most maxTransferKeys; parts go with
// the last call, so the receiver learns a partition is complete only once
// all of its keys are there.
func (mv *mover) pushTo(ctx context.Context, m ring.Member, why limit.Transfer, parts []int, keys []limit.KeyState) error {
	return mv.pushCounted(ctx, m, why, parts, keys, mv.m.transferSent[why])
}

// pushCounted is pushTo counting the keys sent in sent. It sends nothing for no
// keys and no parts.
func (mv *mover) pushCounted(ctx context.Context, m ring.Member, why limit.Transfer, parts []int, keys []limit.KeyState, sent prometheus.Counter) error {
	if len(keys) == 0 && len(parts) == 0 {
		return nil
	}
	sc, err := mv.host.link(m)
	if err != nil {
		return err
	}
	for {
		k, size := 0, 0
		for k < len(keys) && k < maxTransferKeys && (k == 0 || size+len(keys[k].Key)+len(keys[k].State) <= maxTransferBytes) {
			size += len(keys[k].Key) + len(keys[k].State)
			k++
		}
		chunk := keys[:k]
		keys = keys[k:]
		var ps []int
		if len(keys) == 0 {
			ps = parts
		}
		if err := sc.Push(ctx, why, ps, chunk); err != nil {
			return err
		}
		sent.Add(float64(len(chunk)))
		if len(keys) == 0 {
			return nil
		}
	}
}

// exportPartitions returns the state of every key held in parts.
func (mv *mover) exportPartitions(parts []int) []limit.KeyState {
	v := mv.host.ringView()
	in := make([]bool, v.snap.Partitions())
	for _, p := range parts {
		in[p] = true
	}
	now := mv.cfg.Now().UnixNano()
	var out []limit.KeyState
	for a, l := range mv.host.tables() {
		var keys []string
		l.Range(func(key string) bool {
			if in[v.snap.PartitionOf(uniqueKeyOf(key))] {
				keys = append(keys, key)
			}
			return true
		})
		for _, key := range keys {
			if st, ok := l.Export(key, now); ok {
				out = mv.exportRecords(out, limit.Algorithm(a), key)
				out = append(out, limit.KeyState{Algorithm: limit.Algorithm(a), Key: key, State: st})
			}
		}
	}
	return out
}

// exportRecords appends to ks the lease records of key, a key of table a,
// when a's keys are leased and key has any: they travel with the key's
// state, just before it.
func (mv *mover) exportRecords(ks []limit.KeyState, a limit.Algorithm, key string) []limit.KeyState {
	if !leasing.Leasable(limit.Rule{Algorithm: a}) {
		return ks
	}
	return mv.leases.export(ks, key)
}

// importKeys merges keys into the tables; keys that do not decode are
// counted and skipped.
func (mv *mover) importKeys(keys []limit.KeyState, why limit.Transfer) {
	now := mv.cfg.Now().UnixNano()
	bad := 0
	var first error
	refuse := func(err error) {
		if first == nil {
			first = err
		}
		bad++
	}
	mark := why != limit.Replica
	var books []int
	for i := 0; i < len(keys); {
		a := keys[i].Algorithm
		if a == limit.LeaseBook {
			books = append(books, i)
			i++
			continue
		}
		if int(a) >= len(mv.host.tables()) {
			bad++
			i++
			continue
		}
		l := mv.host.tables()[a]
		if each, ok := l.(eachImporter); ok { // the run of keys of a, at once
			j := i + 1
			for j < len(keys) && keys[j].Algorithm == a {
				j++
			}
			each.ImportEach(keys[i:j], now, mark, func(_ int, err error) { refuse(err) })
			i = j
			continue
		}
		if err := l.Import(keys[i].Key, keys[i].State, now, mark); err != nil {
			refuse(err)
		}
		i++
	}
	// The lease records once the states are merged: a release may find a
	// record only where its grant's debit is.
	for _, i := range books {
		if err := mv.leases.importRecords(keys[i].Key, keys[i].State, now); err != nil {
			refuse(err)
		}
	}
	mv.m.transferReceived[why].Add(float64(len(keys) - bad))
	if len(keys) > bad {
		mv.dur.changed()
	}
	if bad > 0 {
		mv.m.transferMalformed.Add(float64(bad))
		mv.log.Warn("state transfer: keys refused", "transfer", why.String(), "refused", bad, "of", len(keys), "err", first)
	}
}

// eachImporter is a table that imports many key states at once, looking
// them up shard by shard (ImportEach of bucket and window); the others
// import key by key.
type eachImporter interface {
	ImportEach(states []limit.KeyState, now int64, mark bool, bad func(i int, err error))
}

// push merges key states sent by another node (Node.Push, its State service).
// For a handoff, partitions lists those the sender has handed over whole:
// an incoming one is settled. One this node's ring does not give it is
// marked received, and so decided here until the ring agrees, only when its
// ring gives it to the sender: a node can hand over only what it owns.
func (mv *mover) push(ctx context.Context, from string, why limit.Transfer, partitions []int, keys []limit.KeyState) error {
	v := mv.host.ringView()
	for _, p := range partitions {
		if p < 0 || p >= v.snap.Partitions() {
			return fmt.Errorf("peer: partition %d out of range", p)
		}
	}
	mv.importKeys(keys, why)
	if len(partitions) == 0 {
		return nil
	}
	h := mv.host.marks()
	h.mu.Lock()
	defer h.mu.Unlock()
	v = mv.host.ringView()
	for _, p := range partitions {
		owner := v.snap.Member(v.snap.PartitionOwner(p))
		switch kind := h.kinds[p].Load(); {
		case owner.Name == mv.cfg.Name:
			if kind != partNormal {
				h.setLocked(p, partNormal, partDetail{})
			}
		case owner.Name == from && kind != partReceived:
			h.setLocked(p, partReceived, partDetail{from: owner, why: why})
		}
	}
	return nil
}

// pull hands partitions over to the node from (Node.Pull, its State service):
// those this node would still decide are marked moved to it first, then
// the batches deciding under the old marks are waited for, then the keys
// are exported.
func (mv *mover) pull(ctx context.Context, r limit.PullRequest) ([]limit.KeyState, error) {
	partitions := r.Partitions
	v := mv.host.ringView()
	for _, p := range partitions {
		if p < 0 || p >= v.snap.Partitions() {
			return nil, fmt.Errorf("peer: partition %d out of range", p)
		}
	}
	mv.notePulled(partitions)
	// What this node is itself still pulling, it hands over once it has it.
	if chans := mv.host.marks().waitFor(partitions); len(chans) > 0 {
		t := time.NewTimer(pullWaitOwn)
		defer t.Stop()
	wait:
		for _, ch := range chans {
			select {
			case <-ch:
			case <-t.C:
				break wait
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
	}
	// Only a partition this node would decide needs a mark: one its ring
	// gives it (its ring is behind the puller's) or that it received. And
	// only when the puller's ring is not behind this node's: a mark made for
	// a puller that has not yet seen the latest change would never be
	// undone (no later rebuild here) and would send the partition's checks
	// away from its owner. So the puller's member list must be the one this
	// node's gossip knows, now or within memberWait (this node's ring is
	// then the one behind, and its rebuild follows). Last, the ring of that
	// list must give the partition to the puller: a pull planned by an
	// older ring of the puller's, for a partition that a later change gave
	// back to this node, hands over the keys but not the partition (marked,
	// it was decided both here, by the ring, and on the puller, which a
	// push of it then marked received: two counts of one key, merged later
	// to the larger, not the sum). A puller whose list is this node's and
	// itself is ahead by its own join alone, which this node's gossip has
	// not heard of even after memberWait (aheadByItsJoin): its ring is the
	// one this node rebuilds to when it hears, and it is marked too.
	mv.markPulled(ctx, r)
	mv.host.marks().drain()
	keys := mv.exportPartitions(partitions)
	mv.m.transferSent[limit.Join].Add(float64(len(keys)))
	return keys, nil
}

// markPulled marks moved to r.From the partitions of r that this node
// would decide and that the ring of the member list it agrees on with the
// puller gives the puller (pull says when they agree).
func (mv *mover) markPulled(ctx context.Context, r limit.PullRequest) {
	agreed := mv.membersAgree(ctx, r.Members)
	to := mv.host.member(r.From)
	if agreed == nil {
		to = ring.Member{Name: r.From, Addr: r.Addr, PeerAddr: r.PeerAddr}
		if agreed = mv.aheadByItsJoin(r); agreed != nil && !mv.pullerStays(ctx, to, r.Members) {
			agreed = nil
		}
	}
	if agreed == nil {
		// This node goes on deciding the partitions, and the puller may
		// decide them too from the keys it takes, until this node hears
		// of it: no lease is granted from them meanwhile (a grant's debit
		// taken here would be lost at the merge, a lease's worth of hits
		// instead of the few checks of the race).
		mv.holdGrants(r.Partitions)
		return
	}
	theirs := mv.ringOf(mv.host.ringView(), agreed)
	h := mv.host.marks()
	h.mu.Lock()
	defer h.mu.Unlock()
	v := mv.host.ringView()
	for _, p := range r.Partitions {
		if peerAddr(to) != "" && theirs != nil && theirs.Member(theirs.PartitionOwner(p)).Name == r.From &&
			(v.snap.PartitionOwner(p) == v.self || h.kinds[p].Load() == partReceived) {
			h.setLocked(p, partMoved, partDetail{to: to, pushed: closedChan, why: limit.Join})
		}
	}
}

// A pull waits at most pullWaitOwn for the partitions this node is itself
// still pulling, and memberWait for this node's gossip to learn the member
// list the puller has, at most 3/5 of what is left of the puller's
// deadline. The news of a join reaches the other members in a gossip
// round or a probe (500 ms each, gossip/membership.go): at 300 ms this
// node often had not heard of the new member yet, answered without
// marking, and went on deciding the keys the new member then decided
// from the pulled state too, two counts of one key for up to the rest of
// a gossip round (over-admission, seen on real processes:
// loadtest TestLeasesExactThroughGracefulChurn).
const (
	pullWaitOwn = time.Second
	memberWait  = time.Second
)

// pullRequest is this node's pull of parts: its ring's member list and its
// own addresses.
func (mv *mover) pullRequest(parts []int) limit.PullRequest {
	v := mv.host.ringView()
	r := limit.PullRequest{Members: fingerprint(v.snap.Members()), Partitions: parts}
	for _, m := range v.snap.Members() {
		r.Names = append(r.Names, m.Name)
	}
	if v.self >= 0 {
		me := v.snap.Member(v.self)
		r.Addr, r.PeerAddr = me.Addr, me.PeerAddr
	}
	return r
}

// aheadByItsJoin returns the member list of r's puller when it is this
// node's gossip membership and the puller, which that membership does not
// know: the puller is ahead of this node by its own join alone (the join's
// news has not reached this node yet), and its ring is the one this node
// will rebuild to once it has. The list is the puller's, the puller with
// the addresses it sent. Nil otherwise, or when r has no names (an older
// puller), or they do not match its fingerprint.
func (mv *mover) aheadByItsJoin(r limit.PullRequest) []ring.Member {
	if len(r.Names) == 0 || r.PeerAddr == "" && r.Addr == "" || fingerprintNames(slices.Clone(r.Names)) != r.Members {
		return nil
	}
	var mine []ring.Member
	if g := mv.cfg.Gossip; g != nil {
		mine = g.Members()
	} else {
		mine = mv.host.ringView().snap.Members()
	}
	if len(r.Names) != len(mine)+1 {
		return nil
	}
	theirs := map[string]bool{}
	for _, n := range r.Names {
		theirs[n] = true
	}
	if len(theirs) != len(r.Names) || !theirs[r.From] || !theirs[mv.cfg.Name] {
		return nil
	}
	out := make([]ring.Member, 0, len(r.Names))
	for _, m := range mine {
		if !theirs[m.Name] || m.Name == r.From {
			return nil
		}
		out = append(out, m)
	}
	return append(out, ring.Member{Name: r.From, Addr: r.Addr, PeerAddr: r.PeerAddr})
}

// pullerStays asks the puller, ahead by its join, for its ring just before
// the mark: it must not be leaving, and its member list must still be the
// one its pull carried. A joiner that leaves again within memberWait (a
// join, then a leave 600 ms later, in loadtest's churn tests) would
// otherwise be marked for after its own leave's push came back, and this
// node would forward the partitions' checks to a node that no longer
// decides them.
func (mv *mover) pullerStays(ctx context.Context, to ring.Member, members uint64) bool {
	l, err := mv.host.link(to)
	if err != nil {
		return false
	}
	info, err := l.Ring(ctx)
	return err == nil && !info.Leaving && info.Members == members
}

// holdGrants refuses grants of keys of parts for leaseHold (see lease).
func (mv *mover) holdGrants(parts []int) {
	now := mv.cfg.Now().UnixNano()
	mv.noGrantsMu.Lock()
	defer mv.noGrantsMu.Unlock()
	if mv.noGrants == nil {
		mv.noGrants = map[int]int64{}
	}
	for p, until := range mv.noGrants {
		if until <= now {
			delete(mv.noGrants, p)
		}
	}
	for _, p := range parts {
		mv.noGrants[p] = now + int64(leaseHold)
	}
}

// membersAgree returns this node's gossip membership once it has the
// fingerprint members, waiting up to memberWait for it to catch up; nil
// when it does not.
func (mv *mover) membersAgree(ctx context.Context, members uint64) []ring.Member {
	current := func() []ring.Member {
		if g := mv.cfg.Gossip; g != nil {
			return g.Members()
		}
		return mv.host.ringView().snap.Members()
	}
	if m := current(); fingerprint(m) == members {
		return m
	}
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	wait := memberWait
	if dl, ok := ctx.Deadline(); ok {
		wait = min(wait, time.Until(dl)*3/5) // leave the export and answer time
	}
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	for {
		select {
		case <-t.C:
			if m := current(); fingerprint(m) == members {
				return m
			}
		case <-deadline.C:
			return nil
		case <-ctx.Done():
			return nil
		}
	}
}

// ringOf returns the ring of members: v's when it has those members, else
// a new one (this node's rebuild for them has not run yet); nil when they
// make no ring.
func (mv *mover) ringOf(v *view, members []ring.Member) *ring.Snapshot {
	if fingerprint(v.snap.Members()) == fingerprint(members) {
		return v.snap
	}
	s, err := ring.New(members, 0, mv.cfg.Ring)
	if err != nil {
		return nil
	}
	return s
}

// fingerprint identifies a member list by its names, in any order.
func fingerprint(members []ring.Member) uint64 {
	names := make([]string, len(members))
	for i, m := range members {
		names[i] = m.Name
	}
	return fingerprintNames(names)
}

// fingerprintNames is fingerprint of the names of a member list; it sorts
// names.
func fingerprintNames(names []string) uint64 {
	slices.Sort(names)
	h := fnv.New64a()
	for _, name := range names {
		h.Write([]byte(name))
		h.Write([]byte{0})
	}
	return h.Sum64()
}

// isMember reports whether name is a member of the ring the node routes by.
func (mv *mover) isMember(name string) bool { return mv.host.ringView().snap.IndexOf(name) >= 0 }

// uniqueKeyOf returns the unique_key part of a table key (see keyBuf).
func uniqueKeyOf(tableKey string) string {
	l, k := binary.Uvarint([]byte(tableKey[:min(len(tableKey), binary.MaxVarintLen64)]))
	if k <= 0 || l > uint64(len(tableKey)-k) {
		return tableKey
	}
	return tableKey[k+int(l):]
}

// waitShed waits, when err is a receiver's refusal for overload, for the
// delay it asked for before a retry (an immediate retry would most likely
// be shed again and use up the retries). It reports false when ctx ended
// meanwhile.
func waitShed(ctx context.Context, err error) bool {
	d, ok := transport.RetryDelay(err)
	if !ok || !errors.Is(err, transport.ErrOverloaded) {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
