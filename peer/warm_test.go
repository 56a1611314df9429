package peer

import (
	"testing"
	"time"

	"github.com/shardlimiter/shardlimiter/limit"
)

// warmKeys gives, for the checks of one algorithm, the table keys that the
// takes will look up (kb.key), and leaves kb.key's buffer alone.
func TestWarmKeysAreTheTableKeys(t *testing.T) {
	checks := []limit.Check{
		{Name: "a", Key: "1", Rule: limit.Rule{Algorithm: limit.TokenBucket}},
		{Name: "bb", Key: "22", Rule: limit.Rule{Algorithm: limit.FixedWindow}},
		{Name: "a", Key: "333", Rule: limit.Rule{Algorithm: limit.TokenBucket}},
		{Name: "", Key: "", Rule: limit.Rule{Algorithm: limit.TokenBucket}},
	}
	var kb keyBuf
	held := kb.key("x", "y")
	got := kb.warmKeys(checks, limit.TokenBucket, 0)
	var want []string
	for _, i := range []int{0, 2, 3} {
		var other keyBuf
		want = append(want, other.key(checks[i].Name, checks[i].Key))
	}
	if len(got) != len(want) {
		t.Fatalf("warmKeys = %q, want %q", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("warmKeys = %q, want %q", got, want)
		}
	}
	if held != "\x01xy" {
		t.Fatalf("kb.key's string changed to %q", held)
	}
}

// warmKeys leaves out the checks whose bit is set in skip: those an entry
// node forwards.
func TestWarmKeysSkipsForwardedChecks(t *testing.T) {
	checks := []limit.Check{
		{Name: "a", Key: "1", Rule: limit.Rule{Algorithm: limit.TokenBucket}},
		{Name: "a", Key: "2", Rule: limit.Rule{Algorithm: limit.TokenBucket}},
		{Name: "a", Key: "3", Rule: limit.Rule{Algorithm: limit.TokenBucket}},
	}
	var kb, other keyBuf
	got := kb.warmKeys(checks, limit.TokenBucket, 0b010)
	want := []string{other.key("a", "1"), "\x01a3"}
	if len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("warmKeys(skip 0b010) = %q, want %q", got, want)
	}
}

// A node leaving a cluster of two forwards every check to the member
// left: its ring, without itself, has that one member (index 0) and this
// node is not on it (index -1). Warming only the keys a ring gives this
// node once took a ring of one member for this node's own, and the
// leaving node decided the checks beside the new owner.
func TestLeavingNodeOfTwoForwardsEveryCheck(t *testing.T) {
	t.Parallel()
	c := newTestCluster(t, 2, Config{Peer: exactPeer})
	nodes := c.running()
	leaver, stayer := nodes[0], nodes[1]
	if err := leaver.node.Leave(); err != nil {
		t.Fatal(err)
	}
	if v := leaver.node.view.Load(); v.snap.Len() != 1 || v.self != -1 {
		t.Fatalf("the leaver's ring has %d members, itself at %d; want the other alone", v.snap.Len(), v.self)
	}
	r := rule(limit.TokenBucket, 100, time.Hour)
	for _, k := range testKeys(20) {
		if res := c.check(leaver, limit.Check{Name: "q", Key: k, Hits: 1, Rule: r})[0]; res.Owner != stayer.name {
			t.Errorf("key %s checked on the leaver: decided by %q, want %s", k, res.Owner, stayer.name)
		}
	}
}
