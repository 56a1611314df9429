package peer

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"

	"github.com/shardlimiter/shardlimiter/internal/poll"
	"github.com/shardlimiter/shardlimiter/limit"
	"github.com/shardlimiter/shardlimiter/snapshot"
)

func newDurableNode(t *testing.T, dir string, clk *fixedClock) (*Node, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	n, err := New(Config{Name: "solo", Now: clk.Now, StateDir: dir, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Restore(); err != nil {
		t.Fatal(err)
	}
	return n, reg
}

// spend sends hits to key under r, one check each, and returns how many
// were admitted.
func spend(t *testing.T, n *Node, key string, r limit.Rule, hits int) int {
	t.Helper()
	admitted := 0
	for range hits {
		res, err := n.Check(context.Background(), []limit.Check{{Name: "r", Key: key, Hits: 1, Rule: r}})
		if err != nil || res[0].Error != "" {
			t.Fatalf("Check(%q) = %+v, %v", key, res, err)
		}
		if res[0].Allowed {
			admitted++
		}
	}
	return admitted
}

// peekRemaining peeks at key.
func peekRemaining(t *testing.T, n *Node, key string, r limit.Rule) int64 {
	t.Helper()
	res, err := n.Check(context.Background(), []limit.Check{{Name: "r", Key: key, Hits: 0, Rule: r}})
	if err != nil || res[0].Error != "" {
		t.Fatalf("peek(%q) = %+v, %v", key, res, err)
	}
	return res[0].Remaining
}

// A snapshot brings every algorithm's counts back in a new node.
func TestSnapshotRestoresEveryAlgorithm(t *testing.T) {
	t.Parallel()
	dir, clk := t.TempDir(), newClock()
	a, _ := newDurableNode(t, dir, clk)
	rules := map[limit.Algorithm]limit.Rule{}
	for _, alg := range append(limit.Algorithms(), append(limit.GubernatorAlgorithms(), limit.Cell)...) {
		r := rule(alg, 10, time.Hour)
		switch alg {
		case limit.LeakyBucket:
			r.Burst = 10
		case limit.Cell:
			r.Limit, r.Burst = 1, 9 // CL.THROTTLE k 9 1 3600
		}
		rules[alg] = r
		spend(t, a, "k-"+alg.String(), r, 4)
	}
	want := map[limit.Algorithm]int64{}
	for alg, r := range rules {
		want[alg] = peekRemaining(t, a, "k-"+alg.String(), r)
	}
	a.mv.writeSnapshot()

	b, _ := newDurableNode(t, dir, clk)
	for alg, r := range rules {
		if got := peekRemaining(t, b, "k-"+alg.String(), r); got != want[alg] {
			t.Errorf("%v: remaining after restore %d, want %d", alg, got, want[alg])
		}
	}
	if got := counterValue(b.mv.dur.m.loadedKeys); got != float64(len(rules)) {
		t.Errorf("loaded keys %v, want %d", got, len(rules))
	}
	if got := counterValue(b.mv.dur.m.loadErrors); got != 0 {
		t.Errorf("load errors %v, want 0", got)
	}
}

// States that expired by the time of the restore are dropped.
func TestSnapshotDropsExpiredStates(t *testing.T) {
	t.Parallel()
	dir, clk := t.TempDir(), newClock()
	a, _ := newDurableNode(t, dir, clk)
	short, long := rule(limit.FixedWindow, 10, time.Minute), rule(limit.FixedWindow, 10, 24*time.Hour)
	spend(t, a, "short", short, 3)
	spend(t, a, "long", long, 3)
	a.mv.writeSnapshot()

	clk.Advance(2 * time.Minute) // the minute window is over, the day's is not
	b, _ := newDurableNode(t, dir, clk)
	if got := b.limiters[limit.FixedWindow].Len(); got != 1 {
		t.Errorf("keys after restore %d, want 1 (the expired one dropped)", got)
	}
	if got := peekRemaining(t, b, "long", long); got != 7 {
		t.Errorf("long: remaining %d, want 7", got)
	}
}

// A restored state merges with what the node holds: the one that consumed
// more wins, both ways.
func TestSnapshotMergeKeepsLargerConsumption(t *testing.T) {
	t.Parallel()
	dir, clk := t.TempDir(), newClock()
	a, _ := newDurableNode(t, dir, clk)
	r := rule(limit.FixedWindow, 10, time.Hour)
	spend(t, a, "snap-more", r, 5)
	spend(t, a, "snap-less", r, 2)
	a.mv.writeSnapshot()

	b, err := New(Config{Name: "solo", Now: clk.Now, StateDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	spend(t, b, "snap-more", r, 3)
	spend(t, b, "snap-less", r, 6)
	if err := b.Restore(); err != nil {
		t.Fatal(err)
	}
	if got := peekRemaining(t, b, "snap-more", r); got != 5 {
		t.Errorf("snap-more: remaining %d, want 5 (the snapshot's 5 hits beat 3)", got)
	}
	if got := peekRemaining(t, b, "snap-less", r); got != 4 {
		t.Errorf("snap-less: remaining %d, want 4 (the node's 6 hits beat 2)", got)
	}
}

// A damaged file is refused whole: the node starts empty, counts it, and
// keeps the file aside.
func TestSnapshotDamagedRefused(t *testing.T) {
	t.Parallel()
	for _, damage := range []string{"truncated", "garbled"} {
		t.Run(damage, func(t *testing.T) {
			t.Parallel()
			dir, clk := t.TempDir(), newClock()
			a, _ := newDurableNode(t, dir, clk)
			r := rule(limit.FixedWindow, 10, time.Hour)
			for i := range 50 {
				spend(t, a, string(rune('a'+i%26))+string(rune('a'+i/26)), r, 2)
			}
			a.mv.writeSnapshot()
			path := snapshot.Path(dir, "solo")
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if damage == "truncated" {
				b = b[:len(b)-len(b)/3]
			} else {
				b[len(b)/2] ^= 0x5A
			}
			if err := os.WriteFile(path, b, 0o600); err != nil {
				t.Fatal(err)
			}
			n, _ := newDurableNode(t, dir, clk)
			if got := n.limiters[limit.FixedWindow].Len(); got != 0 {
				t.Errorf("keys after a %s snapshot: %d, want 0", damage, got)
			}
			if got := counterValue(n.mv.dur.m.loadErrors); got != 1 {
				t.Errorf("load errors %v, want 1", got)
			}
			if _, err := os.Stat(path + ".corrupt"); err != nil {
				t.Errorf("the refused file was not kept aside: %v", err)
			}
			if got := spend(t, n, "aa", r, 12); got != 10 {
				t.Errorf("the node admits %d of 12 at limit 10 after the refusal, want 10", got)
			}
		})
	}
}

// A round with nothing changed since the last writes nothing; a change
// makes the next round write.
func TestSnapshotSkipsWhenUnchanged(t *testing.T) {
	t.Parallel()
	dir, clk := t.TempDir(), newClock()
	n, _ := newDurableNode(t, dir, clk)
	path := snapshot.Path(dir, "solo")
	n.mv.writeSnapshot()
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Fatalf("a node that decided nothing wrote a snapshot (%v)", err)
	}
	r := rule(limit.TokenBucket, 10, time.Hour)
	spend(t, n, "k", r, 1)
	n.mv.writeSnapshot()
	first, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	n.mv.writeSnapshot()
	again, _ := os.Stat(path)
	if !os.SameFile(first, again) {
		t.Error("an unchanged node rewrote its snapshot")
	}
	if got := counterValue(n.mv.dur.m.skipped); got != 2 {
		t.Errorf("skipped rounds %v, want 2", got)
	}
	spend(t, n, "k", r, 1)
	n.mv.writeSnapshot()
	if third, _ := os.Stat(path); os.SameFile(first, third) {
		t.Error("a changed node did not write its snapshot")
	}
}

// Run writes a last snapshot when it ends, and leaves no goroutine behind.
// Not parallel: it checks for leaks.
func TestRunWritesSnapshotAtStop(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	dir, clk := t.TempDir(), newClock()
	n, _ := newDurableNode(t, dir, clk)
	n.mv.dur.interval = time.Millisecond // the loop writes too, meanwhile
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- n.Run(ctx) }()
	r := rule(limit.FixedWindow, 10, time.Hour)
	spend(t, n, "k", r, 4)
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	b, _ := newDurableNode(t, dir, clk)
	if got := peekRemaining(t, b, "k", r); got != 6 {
		t.Errorf("remaining after a restart %d, want 6", got)
	}
}

// Keys a joining node restored that another node owns reach that owner:
// every key answers with its snapshot's count through either node.
func TestRestoredKeysReachTheirOwners(t *testing.T) {
	t.Parallel()
	dir, clk := t.TempDir(), newClock()
	// node-1's snapshot, written by a node of that name on its own.
	lone, err := New(Config{Name: "node-1", Now: clk.Now, StateDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	r := rule(limit.FixedWindow, 100, time.Hour)
	keys := make([]string, 40)
	for i := range keys {
		keys[i] = fmt.Sprintf("account:%d", i)
		spend(t, lone, keys[i], r, 1+i%7)
	}
	lone.mv.writeSnapshot()

	c := newTestCluster(t, 1, Config{Now: clk.Now, StateDir: dir, ReplicationInterval: 10 * time.Millisecond})
	// node-0 serves alone first (the first node of a cluster restarting):
	// it then hands what it loses to node-1 and pulls nothing from it, so
	// node-1's restored keys reach node-0 only by being sent.
	c.check(c.running()[0], limit.Check{Name: "other", Key: "x", Hits: 1, Rule: r})
	c.add()
	c.waitSettled()
	owners := map[string]int{}
	nodes := c.running()
	poll.Until(t, 5*time.Second, func() bool {
		for i, key := range keys {
			for _, tn := range nodes {
				res := c.check(tn, limit.Check{Name: "r", Key: key, Rule: r})
				if res[0].Error != "" || res[0].Remaining != int64(100-1-i%7) {
					return false
				}
				owners[res[0].Owner]++
			}
		}
		return true
	}, "every key answers its snapshot's count through every node")
	if len(owners) != 2 {
		t.Errorf("owners %v: want keys on both nodes, so that some moved", owners)
	}
}

// A node of another name with the same SnapshotName (the next pod of a
// DaemonSet on the same host) restores its predecessor's file.
func TestSnapshotNameOutlivesNodeName(t *testing.T) {
	t.Parallel()
	dir, clk := t.TempDir(), newClock()
	r := rule(limit.FixedWindow, 10, time.Hour)
	var counts []int64
	for _, name := range []string{"pod-a", "pod-b"} {
		n, err := New(Config{Name: name, SnapshotName: "host-1", Now: clk.Now, StateDir: dir})
		if err != nil {
			t.Fatal(err)
		}
		if err := n.Restore(); err != nil {
			t.Fatal(err)
		}
		spend(t, n, "k", r, 3)
		counts = append(counts, peekRemaining(t, n, "k", r))
		n.mv.writeSnapshot()
	}
	if counts[1] != 4 {
		t.Errorf("the second pod's remaining %d after 3 more hits, want 4 (its predecessor's 3 restored)", counts[1])
	}
	if _, err := os.Stat(snapshot.Path(dir, "host-1")); err != nil {
		t.Errorf("no file named after SnapshotName: %v", err)
	}
}

// The cluster view shows the snapshot: its file, the keys of the last
// write and when it began; null without a state directory.
func TestClusterShowsSnapshot(t *testing.T) {
	dir, clk := t.TempDir(), newClock()
	n, _ := newDurableNode(t, dir, clk)
	s := n.Cluster().Snapshot
	if s == nil || s.Dir != dir || s.Path != snapshot.Path(dir, "solo") || s.LastWritten != "" || s.Keys != 0 {
		t.Fatalf("Cluster().Snapshot before a write = %+v, want dir %s, no write yet", s, dir)
	}
	spend(t, n, "a", rule(limit.FixedWindow, 10, time.Hour), 1)
	spend(t, n, "b", rule(limit.FixedWindow, 10, time.Hour), 1)
	n.mv.writeSnapshot()
	if s = n.Cluster().Snapshot; s.Keys != 2 || s.LastWritten == "" || s.LastError != "" {
		t.Errorf("Cluster().Snapshot after a write of 2 keys = %+v", s)
	}
	// A restart shows the restored file's keys before its first write.
	b, _ := newDurableNode(t, dir, clk)
	if s = b.Cluster().Snapshot; s.Keys != 2 || s.LastWritten != "" {
		t.Errorf("Cluster().Snapshot after a restore of 2 keys = %+v", s)
	}
	plain, err := New(Config{Name: "p"})
	if err != nil {
		t.Fatal(err)
	}
	if s := plain.Cluster().Snapshot; s != nil {
		t.Errorf("Cluster().Snapshot without a state dir = %+v, want nil", s)
	}
}
