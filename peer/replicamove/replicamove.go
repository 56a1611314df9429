// Package replicamove finds the partitions a ring change leaves with a
// replica holder that holds nothing of them, and keeps them marked until
// the node's next replication round sends every key of them there:
// docs/ARCHITECTURE.md, "Replication and the stand-in".
//
// Replication sends a key when it changes, so such a holder would never
// get the keys that do not change again, and a crash of their owner would
// have them decided from nothing there. Two changes make one: a ring
// change that gives a partition its owner keeps a new replica holder, and
// a crash or a leave after which a node decides keys from the replica it
// held (imported without being marked changed), whose own holder has
// none of them.
package replicamove

import (
	"sync"

	"github.com/shardlimiter/shardlimiter/ring"
)

// Ring is a ring as a node sees it.
type Ring struct {
	Snap *ring.Snapshot
	// Without returns Snap without the member called name: the ring that
	// holds that member's replicas. Nil when there is none (name is the
	// only member). It may cache what it builds.
	Without func(name string) *ring.Snapshot
}

// Moves returns the partitions that cur gives the member self whose
// replica holder (their owner in cur without self) held nothing of them
// in old: it was neither their replica holder there (their owner in old
// without their old owner) nor their old owner, which holds their state
// for having decided them. A partition self keeps is there when its holder
// changed (all of them when self was alone); one it gained, when its new
// holder is a third node.
func Moves(old, cur Ring, self string) []int {
	i := cur.Snap.IndexOf(self)
	backup := cur.Without(self)
	if i < 0 || backup == nil || old.Snap.Partitions() != cur.Snap.Partitions() {
		return nil
	}
	var out []int
	for p := range cur.Snap.Partitions() {
		if cur.Snap.PartitionOwner(p) != i {
			continue
		}
		now := backup.Member(backup.PartitionOwner(p)).Name
		was := old.Snap.Member(old.Snap.PartitionOwner(p)).Name
		held := ""
		if w := old.Without(was); w != nil {
			held = w.Member(w.PartitionOwner(p)).Name
		}
		if now != held && now != was {
			out = append(out, p)
		}
	}
	return out
}

// Marks are the partitions waiting to be sent whole. Safe for concurrent
// use: rebuilds add, the replication round takes.
type Marks struct {
	mu    sync.Mutex
	parts map[int]struct{}
}

// Add marks parts.
func (m *Marks) Add(parts []int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.parts == nil {
		m.parts = map[int]struct{}{}
	}
	for _, p := range parts {
		m.parts[p] = struct{}{}
	}
}

// Take clears the marks and returns them as a slice of n partitions
// (marks at n or beyond are dropped), or nil when there were none.
func (m *Marks) Take(n int) []bool {
	m.mu.Lock()
	parts := m.parts
	m.parts = nil
	m.mu.Unlock()
	if len(parts) == 0 {
		return nil
	}
	in := make([]bool, n)
	for p := range parts {
		if p < n {
			in[p] = true
		}
	}
	return in
}
