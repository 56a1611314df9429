package peer

import (
	"context"
	"sync"
	"time"

	"github.com/shardlimiter/shardlimiter/limit"
	"github.com/shardlimiter/shardlimiter/ring"
)

// Replication: so that a crash loses at most one interval of hits.
//
// Every Config.ReplicationInterval the node drains the keys its tables
// marked changed (table.Config.TrackChanges) and sends each key's state to
// the other node that holds it:
//
//   - a key this node owns goes to its owner in the ring without this node
//     (view.backup). That is exactly the node that owns the key once this
//     one is gone, so after a crash the new owner decides from the replica
//     and needs no transfer; and while this node is unreachable, the nodes
//     that cannot forward to it send its checks there (a stand-in).
//   - a key this node does not own (it decided it as that stand-in, or
//     while a handoff was under way) goes to its owner, so that an owner
//     that was frozen or cut off catches up as soon as it is back.
//
// The receiver merges (Limiter.Import): the state that has consumed more
// wins, so replicas never admit more than the owner would. Sends are
// asynchronous and batched, one Push per destination per round, all
// destinations in parallel, each bounded by replicaSendTimeout so that one
// frozen node cannot stall the others' replication for long. The keys of a
// failed or skipped send (a suspended destination) wait in a backlog for
// the next round, up to maxReplicaKeys per destination; beyond that the
// oldest are dropped and counted. A rebuild that moves the replica of a
// partition this node keeps has every key of it sent too, changed or not
// (replicamove.go).

// maxReplicaKeys bounds the keys one replication round drains from each
// table; the rest wait for the next round.
const maxReplicaKeys = 1 << 16

// replicaSendTimeout bounds one round's send to one destination.
const replicaSendTimeout = 250 * time.Millisecond

// replicaBacklog holds, per destination, the key states a round could not
// send. Only the replication goroutine uses it.
type replicaBacklog map[string][]limit.KeyState

// replicateLoop runs a round every ReplicationInterval while there is
// something to send, and sleeps while nothing changes: after a round that
// drained nothing and left no backlog, it stops its ticker until a table
// queues a changed key (table.Config.OnChange signals changesWake). A
// change then waits at most one interval, as with a ticker that never
// stops. No change is missed: the loop takes changesWake before each
// round drains the tables, so a key queued after that drain signals it
// again.
func (mv *mover) replicateLoop(ctx context.Context) {
	if mv.cfg.ReplicationInterval <= 0 {
		return
	}
	t := time.NewTicker(mv.cfg.ReplicationInterval)
	t.Stop() // started by the first change
	defer t.Stop()
	backlog := replicaBacklog{}
	spare := map[string][]limit.KeyState{} // the last round's lists, emptied, per destination
	for idle := true; ; {
		if idle {
			select {
			case <-ctx.Done():
				return
			case <-mv.changesWake:
			}
			t.Reset(mv.cfg.ReplicationInterval)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		select {
		case <-mv.changesWake:
		default:
		}
		start := time.Now()
		drained, sent := mv.replicateOnce(ctx, backlog, spare)
		if sent > 0 {
			mv.m.replicationRound.Observe(time.Since(start).Seconds())
		}
		// A round that drained keys may have left some queued (more than
		// maxReplicaKeys, whose signal it took): only an empty round and
		// an empty backlog let the loop sleep.
		if idle = drained == 0 && len(backlog) == 0; idle {
			t.Stop()
			clear(spare) // a sleeping node keeps no lists
		}
	}
}

// replicateOnce sends the keys changed since the last round, with the
// backlog, and returns how many changed keys it drained and how many key
// states it sent. It builds each destination's list in that destination's
// list of spare, and leaves the lists there emptied for the next round: a
// list is not referred to once its send returned (a failed one is copied
// into the backlog).
func (mv *mover) replicateOnce(ctx context.Context, backlog replicaBacklog, spare map[string][]limit.KeyState) (drained, sent int) {
	by, drained := mv.collectReplicas(backlog, spare)
	sent = mv.sendReplicas(ctx, by, backlog)
	clear(spare) // destinations gone from the ring
	for name, d := range by {
		clear(d.ks) // keep no key or state alive
		spare[name] = d.ks[:0]
	}
	return drained, sent
}

// replicaDest is one destination's keys in a round: the last moved of ks
// are those of replica moves.
type replicaDest struct {
	m     ring.Member
	ks    []limit.KeyState
	moved int
}

// pushReplicas sends a destination's keys (d.ks, or ks, the same list): the
// keys of replica moves count in shardlimiter_replication_moved_keys_total
// and the others as replicas sent, each once its push returned. Keys put
// back in the backlog by a failed push count as replicas when sent again.
func (mv *mover) pushReplicas(ctx context.Context, d *replicaDest, ks []limit.KeyState) error {
	cut := len(ks) - d.moved
	if err := mv.pushCounted(ctx, d.m, limit.Replica, nil, ks[:cut], mv.m.transferSent[limit.Replica]); err != nil {
		return err
	}
	return mv.pushCounted(ctx, d.m, limit.Replica, nil, ks[cut:], mv.m.replicaMoved)
}

// collectReplicas takes the backlog of the destinations still on the ring
// and drains the changed keys of the tables, and returns them by
// destination (each list built in its destination's list of spare), with
// how many changed keys it drained.
func (mv *mover) collectReplicas(backlog replicaBacklog, spare map[string][]limit.KeyState) (by map[string]*replicaDest, drained int) {
	v := mv.host.ringView()
	now := mv.cfg.Now().UnixNano()
	// A destination's keys, looked up once per key (no map write).
	by = map[string]*replicaDest{}
	for name, ks := range backlog {
		if i := v.snap.IndexOf(name); i >= 0 {
			by[name] = &replicaDest{m: v.snap.Member(i), ks: ks}
		}
		delete(backlog, name) // a node no longer on the ring gets nothing more
	}
	dest := func(m ring.Member) *replicaDest {
		d := by[m.Name]
		if d == nil {
			d = &replicaDest{m: m, ks: spare[m.Name]}
			by[m.Name] = d
		}
		return d
	}
	// A key's lease records go with its state, just before it: read after
	// the state's export, a record of a grant made meanwhile may be there
	// without its debit, but that grant's own push (replicateGrant)
	// brings the debit before the lessee has the hits to give back.
	put := func(m ring.Member, ks limit.KeyState) {
		d := dest(m)
		d.ks = append(mv.exportRecords(d.ks, ks.Algorithm, ks.Key), ks)
	}
	for a, l := range mv.host.tables() {
		if v.snap.Len() < 2 {
			drained += l.Changed(maxReplicaKeys, func(string) {}) // alone: nobody to send to
			continue
		}
		drained += l.ExportChanged(maxReplicaKeys, now, func(key string, st []byte) {
			uk := uniqueKeyOf(key)
			ks := limit.KeyState{Algorithm: limit.Algorithm(a), Key: key, State: st}
			if o := v.snap.OwnerIndex(uk); o != v.self {
				put(v.snap.Member(o), ks)
			} else if v.backup != nil {
				put(v.backup.Owner(uk), ks)
			}
		})
	}
	// the keys of partitions whose replica moved (replicamove.go), after
	// the changed ones: counted apart once sent
	mv.collectMoved(now, func(m ring.Member, ks limit.KeyState) {
		d := dest(m)
		n := len(d.ks)
		d.ks = append(mv.exportRecords(d.ks, ks.Algorithm, ks.Key), ks)
		d.moved += len(d.ks) - n
	})
	return by, drained
}

// sendReplicas pushes each destination's keys, all in parallel, and puts
// the keys of a failed or skipped (suspended) destination in the backlog.
// It returns how many key states it sent, once every send has returned.
func (mv *mover) sendReplicas(ctx context.Context, by map[string]*replicaDest, backlog replicaBacklog) (sent int) {
	var mu sync.Mutex
	var wg sync.WaitGroup
	for name, d := range by {
		ks := d.ks
		if !mv.host.reachable(d.m) {
			mu.Lock() // a send started earlier in this loop may be keeping its own
			backlog.keep(name, ks, mv.m)
			mu.Unlock()
			continue
		}
		sent += len(ks)
		wg.Go(func() {
			sctx, cancel := context.WithTimeout(ctx, replicaSendTimeout)
			defer cancel()
			if err := mv.pushReplicas(sctx, d, ks); err != nil {
				mv.m.replicationErrors.Inc()
				mv.log.Debug("replication failed", "to", name, "keys", len(ks), "err", err)
				mu.Lock()
				backlog.keep(name, ks, mv.m)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return sent
}

// keep puts ks back for dest's next round, keeping the newest
// maxReplicaKeys (a key may then be there twice: the receiver merges).
func (b replicaBacklog) keep(dest string, ks []limit.KeyState, m *metrics) {
	all := append(b[dest], ks...)
	if drop := len(all) - maxReplicaKeys; drop > 0 {
		m.replicationDropped.Add(float64(drop))
		all = all[drop:]
	}
	b[dest] = all
}
