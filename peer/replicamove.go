package peer

import (
	"github.com/shardlimiter/shardlimiter/limit"
	"github.com/shardlimiter/shardlimiter/peer/replicamove"
	"github.com/shardlimiter/shardlimiter/ring"
)

// Replica moves (package replicamove says why): a rebuild marks the
// partitions this node owns whose replica holder holds nothing of them
// (markReplicaMoves); the next replication round walks the tables once and
// adds the state of every key held of a marked partition that this node
// still owns to its holder's list, beside the changed keys: the same
// sends, backlog and bounds. The marks of rebuilds before that round add
// up, and one walk serves them all.

// markReplicaMoves marks the partitions replicaMoves finds between old and
// cur, and wakes the replication loop. A rebuild calls it once cur is
// stored; it does nothing without replication.
func (mv *mover) markReplicaMoves(old, cur *view) {
	if mv.cfg.ReplicationInterval <= 0 {
		return
	}
	if parts := replicaMoves(old, cur, mv.cfg.Name); len(parts) > 0 {
		mv.moves.Add(parts)
		wake(mv.changesWake)
	}
}

// replicaMoves is replicamove.Moves of two views of this node, self.
func replicaMoves(old, cur *view, self string) []int {
	ringOf := func(v *view) replicamove.Ring {
		return replicamove.Ring{Snap: v.snap, Without: func(name string) *ring.Snapshot {
			if name == self && v.self >= 0 {
				return v.backup
			}
			return v.without(name)
		}}
	}
	return replicamove.Moves(ringOf(old), ringOf(cur), self)
}

// collectMoved takes the marked partitions and hands add the state of each
// key held in those this node owns now, with its replica holder, up to
// maxReplicaKeys in all; the partitions of the keys past that stay marked
// for the next round. Each key is exported under its own lock, as a
// snapshot does (durable.go). It returns how many keys it handed out.
func (mv *mover) collectMoved(now int64, add func(ring.Member, limit.KeyState)) (n int) {
	in := mv.moves.Take(mv.host.ringView().snap.Partitions())
	// Loaded again after the marks: a rebuild stores its ring before it
	// marks, so this ring is at least as new as every mark taken.
	v := mv.host.ringView()
	if in == nil || v.backup == nil {
		return 0 // alone: a join marks every kept partition again
	}
	var left []int
	for a, l := range mv.host.tables() {
		l.Range(func(key string) bool {
			uk := uniqueKeyOf(key)
			p := v.snap.PartitionOf(uk)
			if !in[p] || v.snap.PartitionOwner(p) != v.self {
				return true
			}
			if n >= maxReplicaKeys {
				left = append(left, p)
			} else if st, ok := l.Export(key, now); ok {
				add(v.backup.Owner(uk), limit.KeyState{Algorithm: limit.Algorithm(a), Key: key, State: st})
				n++
			}
			return true
		})
	}
	if len(left) > 0 {
		mv.moves.Add(left)
		wake(mv.changesWake)
	}
	return n
}
