package peer

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shardlimiter/shardlimiter/ring"
)

// refutingGossip is a fixed membership whose node can be told that the
// others held it dead (DeathsRefuted).
type refutingGossip struct {
	members []ring.Member
	refutes atomic.Uint64
}

func (g *refutingGossip) Run(ctx context.Context) error { <-ctx.Done(); return nil }
func (g *refutingGossip) Members() []ring.Member        { return g.members }
func (g *refutingGossip) Changed() <-chan struct{}      { return nil }
func (g *refutingGossip) Joined() bool                  { return true }
func (g *refutingGossip) Leave(time.Duration) error     { return nil }
func (g *refutingGossip) DeathsRefuted() uint64         { return g.refutes.Load() }

// TestHeldDeadTakesItsPartitionsBack: a clustered node whose ring never
// changed learns that the others held it dead (a partition healed before
// its own suspicions timed out): its next ring, the same members, marks
// every partition it owns incoming from that partition's owner in the
// ring without it, where the others decided it meanwhile, so that it
// decides none of their keys before their state is here. Before, they
// stayed normal and it decided them from its own state at once, while
// the others went on until their pushes landed (seen: three keys admitted
// by two nodes in the second after an early heal). The peers' forwarding
// suspensions are lifted first, as when a ring gains a member: the pulls
// failed at once on a suspension left by the cut (seen in a nemesis run).
// Without a refutation, or while alone, nothing is marked.
func TestHeldDeadTakesItsPartitionsBack(t *testing.T) {
	t.Parallel()
	all := abcMembers()
	g := &refutingGossip{members: all}
	a, err := New(Config{Name: "a", Gossip: g, PeerBackoff: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	settle := func(members []ring.Member) { rebuildSettled(t, a, members) }
	settle(all[:1])
	settle(all)
	// incoming lists a's partitions marked incoming, checking each one's
	// source.
	without, err := ring.New(all[1:], 1, ring.Config{})
	if err != nil {
		t.Fatal(err)
	}
	incoming := func() (n, mine int) {
		t.Helper()
		v := a.view.Load()
		for p := range v.snap.Partitions() {
			if v.snap.PartitionOwner(p) != v.self {
				continue
			}
			mine++
			if a.ho.kind(p) != partIncoming {
				continue
			}
			n++
			a.ho.mu.Lock()
			from := a.ho.parts[p].from.Name
			a.ho.mu.Unlock()
			if want := without.Member(without.PartitionOwner(p)).Name; from != want {
				t.Errorf("partition %d incoming from %s, want %s (its owner without a)", p, from, want)
			}
		}
		return n, mine
	}
	if err := a.rebuild(all); err != nil {
		t.Fatal(err)
	}
	if n, _ := incoming(); n != 0 {
		t.Fatalf("the same ring again, no refutation: %d partitions incoming, want 0", n)
	}
	// A forward to b failed in the cut: b is suspended (for an hour).
	pc, err := a.peers.client(all[1])
	if err != nil {
		t.Fatal(err)
	}
	now := a.peers.now()
	pc.down.failed(now, now)
	g.refutes.Add(1)
	if err := a.rebuild(all); err != nil {
		t.Fatal(err)
	}
	if n, mine := incoming(); n != mine || mine == 0 {
		t.Fatalf("after the others held a dead: %d of its %d partitions incoming, want all", n, mine)
	}
	if !a.peers.allowed(all[1]) {
		t.Error("b, which holds a alive again, is still suspended: the pulls from it fail at once")
	}
	settle(all)
	if n, _ := incoming(); n != 0 {
		t.Fatalf("taken back once: %d partitions incoming after the next ring, want 0", n)
	}
	// Held dead while alone: taken back at its next ring with others.
	g.refutes.Add(1)
	settle(all[:1])
	if err := a.rebuild(all); err != nil {
		t.Fatal(err)
	}
	if n, mine := incoming(); n != mine {
		t.Fatalf("held dead while alone, then the others back: %d of its %d partitions incoming, want all", n, mine)
	}
}
