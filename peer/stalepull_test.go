package peer

import (
	"context"
	"testing"
	"time"

	"github.com/shardlimiter/shardlimiter/limit"
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
	all := abcMembers()
	full, err := ring.New(all, 1, ring.Config{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	settled := func(n *Node, members []ring.Member) { rebuildSettled(t, n, members) }

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
	if _, err := a.Pull(ctx, limit.PullRequest{From: "b", Members: fingerprint(all), Partitions: []int{mine}}); err != nil {
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
	if _, err := lag.Pull(ctx, limit.PullRequest{From: "b", Members: fingerprint(all), Partitions: []int{moving, mine}}); err != nil {
		t.Fatal(err)
	}
	if k := lag.ho.kind(moving); k != partMoved {
		t.Errorf("a pull by b of a partition the agreed ring gives b left it %s on a lagging a, want moved", partKindNames[k])
	}
	if k := lag.ho.kind(mine); k != partNormal {
		t.Errorf("a pull by b of a partition the agreed ring gives a left it %s on a lagging a, want normal", partKindNames[k])
	}
}

// TestPullMarksForAPullerAheadByItsJoin: a node whose gossip has not heard
// of a joiner by the time the joiner pulls (memberWait passed) hands the
// partitions over all the same (marks them moved to the joiner, at the
// addresses the pull carries) when the joiner's member names are its own
// and the joiner's: the joiner is ahead by its join alone, and its ring
// is the one this node rebuilds to when the news arrives. Before the pull
// carried the names, the partition stayed normal here and was decided
// both here and on the joiner until then (1-3 hits over in about one
// join-only churn run of ten). A puller behind this node (it lacks a
// member this node knows), names that do not match their fingerprint, and
// a partition the joiner's ring does not give it are not marked, nor is
// one whose puller, asked just before the mark, has begun to leave.
func TestPullMarksForAPullerAheadByItsJoin(t *testing.T) {
	t.Parallel()
	a0 := ring.Member{Name: "a", Addr: "127.0.0.1:1", PeerAddr: "127.0.0.1:11"}
	b := ring.Member{Name: "b", Addr: "127.0.0.1:2", PeerAddr: "127.0.0.1:12"}
	c := ring.Member{Name: "c", Addr: "127.0.0.1:3", PeerAddr: "127.0.0.1:13"}
	d := ring.Member{Name: "d", Addr: "127.0.0.1:4", PeerAddr: "127.0.0.1:14"}
	joined, err := ring.New([]ring.Member{a0, b, c}, 1, ring.Config{})
	if err != nil {
		t.Fatal(err)
	}
	// b, as a asks it before the mark: its ring of a, b and c.
	net := NewMemNet()
	bn, err := New(Config{Name: "b", Gossip: fixedGossip{members: []ring.Member{a0, b, c}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := bn.rebuild([]ring.Member{a0, b, c}); err != nil {
		t.Fatal(err)
	}
	net.Add(b.PeerAddr, bn)
	newA := func(known ...ring.Member) (*Node, int, int) {
		n, err := New(Config{Name: "a", Gossip: fixedGossip{members: known}, Peers: net})
		if err != nil {
			t.Fatal(err)
		}
		rebuildSettled(t, n, known)
		v := n.view.Load()
		moving, kept := -1, -1
		for p := range joined.Partitions() {
			switch {
			case moving < 0 && joined.Member(joined.PartitionOwner(p)).Name == "b" && v.snap.PartitionOwner(p) == v.self:
				moving = p
			case kept < 0 && joined.Member(joined.PartitionOwner(p)).Name == "a" && v.snap.PartitionOwner(p) == v.self:
				kept = p
			}
		}
		if moving < 0 || kept < 0 {
			t.Fatal("no partition moves from a to b, or none stays")
		}
		return n, moving, kept
	}
	pull := func(n *Node, names []string, members uint64, parts ...int) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond) // memberWait: 3/5 of it
		defer cancel()
		if _, err := n.Pull(ctx, limit.PullRequest{From: "b", Members: members, Names: names, Addr: b.Addr, PeerAddr: b.PeerAddr, Partitions: parts}); err != nil {
			t.Fatal(err)
		}
	}
	abc := []string{"c", "b", "a"}
	fp := fingerprint([]ring.Member{a0, b, c})

	n, moving, kept := newA(a0, c)
	pull(n, abc, fp, moving, kept)
	if k := n.ho.kind(moving); k != partMoved {
		t.Fatalf("a pull by b, ahead of a by its join, left the partition it takes %s on a, want moved", partKindNames[k])
	}
	if to, _, _ := n.ho.target(moving); to != b {
		t.Errorf("the partition moved to %+v, want b at the addresses of its pull %+v", to, b)
	}
	if k := n.ho.kind(kept); k != partNormal {
		t.Errorf("the pull left a partition the joined ring gives a %s, want normal", partKindNames[k])
	}

	n, moving, _ = newA(a0, c)
	pull(n, abc, fp+1, moving) // names that are not the fingerprint's
	pull(n, nil, fp, moving)   // an older puller: no names
	if k := n.ho.kind(moving); k != partNormal {
		t.Errorf("a pull whose names do not match, or with none, left the partition %s, want normal", partKindNames[k])
	}

	n, moving, _ = newA(a0, c, d) // b has not heard of d: it is behind a
	pull(n, abc, fp, moving)
	if k := n.ho.kind(moving); k != partNormal {
		t.Errorf("a pull by b, behind a (no d), left the partition %s, want normal", partKindNames[k])
	}

	// b began to leave after its pull: a asks it before the mark, and
	// keeps the partition (and grants nothing of it for a while).
	bn.leaving.Store(true)
	n, moving, _ = newA(a0, c)
	pull(n, abc, fp, moving)
	if k := n.ho.kind(moving); k != partNormal {
		t.Errorf("a pull by b, leaving by the time of the answer, left the partition %s, want normal", partKindNames[k])
	}
	if !n.mv.grantsHeld(moving, n.cfg.Now().UnixNano()) {
		t.Error("a partition whose pull was answered unmarked is leased meanwhile")
	}
}

// abcMembers is a ring of three members, a, b and c, at loopback
// addresses nothing serves.
func abcMembers() []ring.Member {
	return []ring.Member{
		{Name: "a", Addr: "127.0.0.1:1", PeerAddr: "127.0.0.1:11"},
		{Name: "b", Addr: "127.0.0.1:2", PeerAddr: "127.0.0.1:12"},
		{Name: "c", Addr: "127.0.0.1:3", PeerAddr: "127.0.0.1:13"},
	}
}
