package peer

import (
	"sync"

	"github.com/shardlimiter/shardlimiter/limit"
	"github.com/shardlimiter/shardlimiter/ring"
)

// Replica moves: replication sends a key when it changes (replicate.go),
// so a ring change that gives a partition this node keeps a new replica
// holder would leave that holder without every key that does not change
// again, and a crash of this node would then have its keys decided from
// nothing there. A rebuild marks such partitions (markReplicaMoves); the
// next replication round walks the tables once and adds the state of every
// key held of a marked partition that this node still owns to its
// holder's list, beside the changed keys: the same sends, backlog and
// bounds. The marks of rebuilds before that round add up, and one walk
// serves them all.

// replicaMoves returns the partitions that old and cur both give this node
// whose replica holder (their owner in the ring without this node) differs
// between the two, or that had none in old (this node was alone).
func replicaMoves(old, cur *view) []int {
	if old.self < 0 || cur.self < 0 || cur.backup == nil || old.snap.Partitions() != cur.snap.Partitions() {
		return nil
	}
	var out []int
	for p := range cur.snap.Partitions() {
		if old.snap.PartitionOwner(p) != old.self || cur.snap.PartitionOwner(p) != cur.self {
			continue
		}
		now := cur.backup.Member(cur.backup.PartitionOwner(p)).Name
		if old.backup == nil || old.backup.Member(old.backup.PartitionOwner(p)).Name != now {
			out = append(out, p)
		}
	}
	return out
}

// replicaMarks are the partitions marked for a resend to their replica
// holder. Rebuilds add to them; the replication goroutine takes them.
type replicaMarks struct {
	mu    sync.Mutex
	parts map[int]struct{}
}

func (rm *replicaMarks) add(parts []int) {
	rm.mu.Lock()
	defer rm.mu.Unlock()
	if rm.parts == nil {
		rm.parts = map[int]struct{}{}
	}
	for _, p := range parts {
		rm.parts[p] = struct{}{}
	}
}

func (rm *replicaMarks) take() map[int]struct{} {
	rm.mu.Lock()
	defer rm.mu.Unlock()
	parts := rm.parts
	rm.parts = nil
	return parts
}

// markReplicaMoves marks the partitions of replicaMoves(old, cur) and wakes
// the replication loop. A rebuild calls it once cur is stored; it does
// nothing without replication.
func (mv *mover) markReplicaMoves(old, cur *view) {
	if mv.cfg.ReplicationInterval <= 0 {
		return
	}
	if parts := replicaMoves(old, cur); len(parts) > 0 {
		mv.moves.add(parts)
		wake(mv.changesWake)
	}
}

// collectMoved takes the marked partitions and hands add the state of each
// key held in those this node owns now, with its replica holder, up to
// maxReplicaKeys in all; the partitions of the keys past that stay marked
// for the next round. Each key is exported under its own lock, as a
// snapshot does (durable.go). It returns how many keys it handed out.
func (mv *mover) collectMoved(now int64, add func(ring.Member, limit.KeyState)) (n int) {
	parts := mv.moves.take()
	// Loaded after the marks: a rebuild stores its ring before it marks,
	// so this ring is at least as new as every mark taken.
	v := mv.host.ringView()
	if len(parts) == 0 || v.backup == nil {
		return 0 // alone: a join marks every kept partition again
	}
	in := make([]bool, v.snap.Partitions()) // a load per key, not a map lookup
	for p := range parts {
		if p < len(in) {
			in[p] = true
		}
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
		mv.moves.add(left)
		wake(mv.changesWake)
	}
	mv.m.replicaMoved.Add(float64(n))
	return n
}
