package peer

import (
	"fmt"
	"testing"
	"time"

	"github.com/shardlimiter/shardlimiter/internal/poll"
	"github.com/shardlimiter/shardlimiter/limit"
)

// Keys forwarded below the lease threshold never enter the lessee's map
// (the demand sketch keeps them out: no lock, no lookup), and a key
// forwarded above it does, within a rate window.
func TestColdKeysStayOutOfTheLeaseMap(t *testing.T) {
	t.Parallel()
	n, err := New(Config{Name: "a", Leases: true}) // the default threshold: 100 checks/s, 10 a window
	if err != nil {
		t.Fatal(err)
	}
	lh := n.lh
	r := limit.Rule{Algorithm: limit.TokenBucket, Limit: 10, Period: time.Second}
	t0 := int64(1_000) * int64(leaseWindow)
	// 50,000 keys, each checked once, 5,000 a window: 50,000 checks/s,
	// about 0.6 checks per slot and window.
	for i := range 50_000 {
		at := t0 + int64(i/5_000)*int64(leaseWindow)
		if e := lh.entry(fmt.Sprintf("cold-%d", i), r, at); e != nil {
			t.Fatalf("entry(%q) = %+v after one check, want nil", e.key, e)
		}
	}
	t0 += 10 * int64(leaseWindow)
	tw := t0 + 2*int64(leaseWindow) // a window of its own: no cold key shares its slot's count
	for i := range 9 {              // 9 checks in the window: under the threshold's 10
		if e := lh.entry("warm", r, tw+int64(i)); e != nil {
			t.Fatalf("entry(warm) = %+v after %d checks in a window, want nil", e, i+1)
		}
	}
	if e := lh.entry("warm", r, tw+int64(leaseWindow)); e != nil {
		t.Fatalf("entry(warm) in the next window = %+v, want nil (the count starts again)", e)
	}
	t1 := t0 + 4*int64(leaseWindow)
	var hot *heldKey
	for i := range 10 {
		hot = lh.entry("hot", r, t1+int64(i))
	}
	if hot == nil || hot.key != "hot" {
		t.Fatalf("entry(hot) after 10 checks in a window = %+v, want the key tracked", hot)
	}
	if again := lh.entry("hot", r, t1+int64(leaseWindow)); again != hot {
		t.Fatalf("entry(hot) once tracked = %p, want %p", again, hot)
	}
	lh.mu.RLock()
	size := len(lh.keys)
	lh.mu.RUnlock()
	if size != 1 || lh.size.Load() != 1 {
		t.Fatalf("tracked keys: %d (size %d), want 1 (hot)", size, lh.size.Load())
	}
	if got := hot.slot.tracked(); got < 1 {
		t.Fatalf("the hot key's slot tracks %d keys, want at least 1", got)
	}
}

// With the default threshold, a key forwarded well above it still gets a
// lease and is decided on the lessee.
func TestHotKeyLeasedAtTheDefaultThreshold(t *testing.T) {
	clk := newClock()
	c := newMemCluster(t, 2, Config{Now: clk.Now, Leases: true, Peer: exactPeer})
	r := limit.Rule{Algorithm: limit.TokenBucket, Limit: 1_000_000, Period: time.Second}
	owner, lessee := c.running()[0], c.running()[1]
	key := keyOwnedBy(t, owner, owner.name)
	check := func() limit.Result {
		t.Helper()
		return c.check(lessee, limit.Check{Name: "quota", Key: key, Hits: 1, Rule: r})[0]
	}
	// 50 checks every 10 ms: 5,000 checks/s, over three rate windows.
	for range 30 {
		for range 50 {
			check()
		}
		clk.Advance(10 * time.Millisecond)
	}
	poll.Until(t, 10*time.Second, func() bool { return lessee.node.lh.held.Load() > 0 }, "the lessee holds a lease")
	if res := check(); !res.Allowed || res.Owner != lessee.name {
		t.Fatalf("check of the hot key: %+v, want admitted by the lessee", res)
	}
}
