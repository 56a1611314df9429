package peer

import (
	"context"
	"testing"

	"github.com/shardlimiter/shardlimiter/ring"
)

// TestPullMarksOnlyWhatThePullerOwns: a node answering a pull marks a
// partition moved to the puller (and stops deciding it) only when the ring
// of the members they agree on gives it to the puller. A pull planned by
// an older ring of the puller's, for a partition a later change gave back
// to the answering node, gets the keys and leaves the partition where it
// is: marked, it was decided on both nodes (seen: a real cluster forming
// kept two counts of one key, and lost one at the next merge). A node
// whose own ring lags behind the agreed members still hands over what
// those members' ring gives the puller.
func TestPullMarksOnlyWhatThePullerOwns(t *testing.T) {
	t.Parallel()
	all := []ring.Member{
		{Name: "a", Addr: "127.0.0.1:1", PeerAddr: "127.0.0.1:11"},
		{Name: "b", Addr: "127.0.0.1:2", PeerAddr: "127.0.0.1:12"},
		{Name: "c", Addr: "127.0.0.1:3", PeerAddr: "127.0.0.1:13"},
	}
	full, err := ring.New(all, 1, ring.Config{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	// settled rebuilds n's ring for members and ends the pulls the
	// rebuild planned, as if their state had arrived.
	settled := func(n *Node, members []ring.Member) {
		t.Helper()
		if err := n.rebuild(members); err != nil {
			t.Fatal(err)
		}
		n.mv.jobsMu.Lock()
		n.mv.jobs = nil
		n.mv.jobsMu.Unlock()
		parts := make([]int, full.Partitions())
		for p := range parts {
			parts[p] = p
		}
		n.ho.settle(parts)
	}

	// Rings agree: a keeps what the ring gives it.
	a, err := New(Config{Name: "a"})
	if err != nil {
		t.Fatal(err)
	}
	settled(a, all)
	mine := -1
	for p := range full.Partitions() {
		if full.Member(full.PartitionOwner(p)).Name == "a" {
			mine = p
			break
		}
	}
	if _, err := a.Pull(ctx, "b", fingerprint(all), []int{mine}); err != nil {
		t.Fatal(err)
	}
	if k := a.ho.kind(mine); k != partNormal {
		t.Errorf("a stale pull by b of a partition a owns left it %s on a, want normal", partKindNames[k])
	}

	// a's ring lags (it has only a and c): a partition the full ring gives
	// b but a's ring gives a is handed over.
	lag, err := New(Config{Name: "a", Gossip: fixedGossip{members: all}})
	if err != nil {
		t.Fatal(err)
	}
	settled(lag, []ring.Member{all[0], all[2]})
	v := lag.view.Load()
	moving := -1
	for p := range full.Partitions() {
		if full.Member(full.PartitionOwner(p)).Name == "b" && v.snap.PartitionOwner(p) == v.self {
			moving = p
			break
		}
	}
	if moving < 0 {
		t.Fatal("no partition moves from a to b")
	}
	if _, err := lag.Pull(ctx, "b", fingerprint(all), []int{moving, mine}); err != nil {
		t.Fatal(err)
	}
	if k := lag.ho.kind(moving); k != partMoved {
		t.Errorf("a pull by b of a partition the agreed ring gives b left it %s on a lagging a, want moved", partKindNames[k])
	}
	if k := lag.ho.kind(mine); k != partNormal {
		t.Errorf("a pull by b of a partition the agreed ring gives a left it %s on a lagging a, want normal", partKindNames[k])
	}
}
