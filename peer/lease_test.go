package peer

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/shardlimiter/shardlimiter/limit"
	"github.com/shardlimiter/shardlimiter/ring"
)

// leaseOwner is a mover that grants leases, on host a of a ring a, b, c,
// with a key a owns, and the table key of a key b owns.
func leaseOwner(t *testing.T) (mv *mover, h *fakeHost, clk *fixedClock, key, otherKey string) {
	t.Helper()
	h = newFakeHost(t, "a", "a", "b", "c")
	clk = newClock()
	mv = newMover(Config{Name: "a", Now: clk.Now, ReplicationInterval: time.Second, Leases: true}, h, slog.New(slog.DiscardHandler), newMetrics(nil, nil, 0))
	var kb keyBuf
	for _, k := range testKeys(64) {
		switch h.v.snap.Owner(k).Name {
		case "a":
			key = strings.Clone(kb.key("q", k))
		case "b":
			otherKey = strings.Clone(kb.key("q", k))
		}
	}
	if key == "" || otherKey == "" {
		t.Fatal("no key of a or of b among the test keys")
	}
	return mv, h, clk, key, otherKey
}

// A grant is a debit: the owner admits, after granting, only what the key
// had left, so the owner and the lessee together admit the capacity and
// not one hit more. The grant is answered only once the debited state is
// at the key's replica holder.
func TestLeaseGrantIsADebit(t *testing.T) {
	mv, h, clk, key, _ := leaseOwner(t)
	r := rule(limit.TokenBucket, 10, time.Hour)
	g, err := mv.lease(context.Background(), limit.LeaseRequest{From: "b", Key: key, Rule: r, Want: 4})
	if err != nil || g.Hits != 4 || g.ID == 0 || g.TTL != leaseTTL {
		t.Fatalf("grant: %+v, %v; want 4 hits with an id and the TTL", g, err)
	}
	if got := mv.leases.heldHits(clk.Now().UnixNano()); got != 4 {
		t.Errorf("book holds %d hits, want 4", got)
	}
	backup := h.v.backup.Owner(uniqueKeyOf(key)).Name
	if got := keysOf(h.pushed[backup]); !got[key] {
		t.Fatalf("the grant was answered before its debit reached the replica holder %s", backup)
	}
	now := clk.Now().UnixNano()
	tb := h.tbl[limit.TokenBucket]
	admitted := int64(0)
	for range 20 {
		if tb.Take(key, now, r, 1).Allowed {
			admitted++
		}
	}
	if admitted != 6 {
		t.Fatalf("after a grant of 4 of 10 the owner admitted %d, want 6", admitted)
	}
	// The replica holds the debit too: merged into a fresh table it
	// leaves 6.
	rep := newFakeHost(t, "b", "a", "b", "c").tbl[limit.TokenBucket]
	pushed := h.pushed[backup]
	if err := rep.Import(key, pushed[len(pushed)-1].State, now, false); err != nil {
		t.Fatal(err)
	}
	if d := rep.Take(key, now, r, 7); d.Allowed {
		t.Fatalf("the replica admitted 7 after a grant of 4 of 10: %+v", d)
	}
}

// A release credits back what the lessee did not use: at most the hits of
// its grant, once, and only to the lessee that holds it.
func TestLeaseReleaseCreditsOnce(t *testing.T) {
	mv, h, clk, key, _ := leaseOwner(t)
	r := rule(limit.TokenBucket, 10, time.Hour)
	g, err := mv.lease(context.Background(), limit.LeaseRequest{From: "b", Key: key, Rule: r, Want: 4})
	if err != nil || g.Hits != 4 {
		t.Fatalf("grant: %+v, %v", g, err)
	}
	if c, _ := mv.lease(context.Background(), limit.LeaseRequest{From: "c", Key: key, Rule: r, Release: g.ID, Leftover: 4}); c.Credited != 0 {
		t.Fatalf("a node that does not hold the grant was credited %d", c.Credited)
	}
	c, err := mv.lease(context.Background(), limit.LeaseRequest{From: "b", Key: key, Rule: r, Release: g.ID, Leftover: 100})
	if err != nil || c.Credited != 4 {
		t.Fatalf("release of 100 left of a grant of 4: credited %d, %v; want 4", c.Credited, err)
	}
	if c, _ := mv.lease(context.Background(), limit.LeaseRequest{From: "b", Key: key, Rule: r, Release: g.ID, Leftover: 4}); c.Credited != 0 {
		t.Fatalf("a second release of one grant was credited %d", c.Credited)
	}
	if got := mv.leases.heldHits(clk.Now().UnixNano()); got != 0 {
		t.Errorf("book holds %d hits after the release, want 0", got)
	}
	now := clk.Now().UnixNano()
	if d := h.tbl[limit.TokenBucket].Take(key, now, r, 10); !d.Allowed {
		t.Fatalf("after the full release the key did not have its capacity: %+v", d)
	}
	if d := h.tbl[limit.TokenBucket].Take(key, now, r, 1); d.Allowed {
		t.Fatalf("admitted past the capacity after a release: %+v", d)
	}
}

// Sizes: at most a fair share of what is left, nothing near the limit, a
// deny lease over it; nothing for a key owned elsewhere; nothing when the
// replica holder does not take the debit, which is then given back.
func TestLeaseSizesAndRefusals(t *testing.T) {
	mv, h, clk, key, otherKey := leaseOwner(t)
	r := rule(limit.TokenBucket, 100, time.Hour)
	ctx := context.Background()
	if g, _ := mv.lease(ctx, limit.LeaseRequest{From: "b", Key: otherKey, Rule: r, Want: 10}); g.NotOwner != "b" || g.Hits != 0 {
		t.Fatalf("lease of a key b owns: %+v, want NotOwner b", g)
	}
	if g, _ := mv.lease(ctx, limit.LeaseRequest{From: "b", Key: key, Rule: r, Want: 1000}); g.Hits != 50 {
		t.Fatalf("first lessee of a fresh key of 100 got %d, want 50 (half: itself and the owner)", g.Hits)
	}
	if g, _ := mv.lease(ctx, limit.LeaseRequest{From: "c", Key: key, Rule: r, Want: 1000}); g.Hits != 16 {
		t.Fatalf("second lessee with 50 left got %d, want 16 (a third)", g.Hits)
	}
	now := clk.Now().UnixNano()
	tb := h.tbl[limit.TokenBucket]
	tb.Take(key, now, r, 10) // 24 left: under a quarter
	if g, _ := mv.lease(ctx, limit.LeaseRequest{From: "b", Key: key, Rule: r, Want: 5}); g.Hits != 0 || g.Deny != 0 {
		t.Fatalf("near the limit: %+v, want nothing", g)
	}
	tb.Take(key, now, r, 24)
	g, _ := mv.lease(ctx, limit.LeaseRequest{From: "b", Key: key, Rule: r, Want: 5})
	if g.Hits != 0 || g.Deny != leaseTTL {
		t.Fatalf("over the limit: %+v, want a deny lease of the TTL (one hit comes back in 36 s)", g)
	}

	mv2, h2, clk2, key2, _ := leaseOwner(t)
	h2.refuse[h2.v.backup.Owner(uniqueKeyOf(key2)).Name] = true
	if g, _ := mv2.lease(ctx, limit.LeaseRequest{From: "b", Key: key2, Rule: r, Want: 10}); g.Hits != 0 {
		t.Fatalf("grant answered although its replica failed: %+v", g)
	}
	if d := h2.tbl[limit.TokenBucket].Take(key2, clk2.Now().UnixNano(), r, 100); !d.Allowed {
		t.Fatalf("a grant whose replica failed was not given back: %+v", d)
	}
}

// A lessee pools its grants of a key: its release is credited against all
// of them up to the grant it names (a later one may still be on its way
// to it), and only once.
func TestLeaseReleaseCoversPooledGrants(t *testing.T) {
	mv, h, clk, key, _ := leaseOwner(t)
	r := rule(limit.TokenBucket, 100, time.Hour)
	ctx := context.Background()
	g1, _ := mv.lease(ctx, limit.LeaseRequest{From: "b", Key: key, Rule: r, Want: 4})
	g2, _ := mv.lease(ctx, limit.LeaseRequest{From: "b", Key: key, Rule: r, Want: 3})
	g3, _ := mv.lease(ctx, limit.LeaseRequest{From: "c", Key: key, Rule: r, Want: 5})
	if g1.Hits != 4 || g2.Hits != 3 || g3.Hits != 5 {
		t.Fatalf("grants %d, %d, %d; want 4, 3, 5", g1.Hits, g2.Hits, g3.Hits)
	}
	if c, _ := mv.lease(ctx, limit.LeaseRequest{From: "b", Key: key, Rule: r, Release: g1.ID, Leftover: 50}); c.Credited != 4 {
		t.Fatalf("release naming b's first grant of 4: credited %d, want 4 (the later grant kept)", c.Credited)
	}
	if c, _ := mv.lease(ctx, limit.LeaseRequest{From: "b", Key: key, Rule: r, Release: g2.ID, Leftover: 50}); c.Credited != 3 {
		t.Fatalf("release naming b's second grant of 3: credited %d, want 3", c.Credited)
	}
	if c, _ := mv.lease(ctx, limit.LeaseRequest{From: "b", Key: key, Rule: r, Release: g1.ID, Leftover: 4}); c.Credited != 0 {
		t.Fatalf("b's first grant was credited again: %d", c.Credited)
	}
	if got := mv.leases.heldHits(clk.Now().UnixNano()); got != 5 {
		t.Errorf("book holds %d hits, want c's 5", got)
	}
	now := clk.Now().UnixNano()
	if d := h.tbl[limit.TokenBucket].Take(key, now, r, 95); !d.Allowed {
		t.Fatalf("the owner could not take the 95 left beside c's lease: %+v", d)
	}
	if d := h.tbl[limit.TokenBucket].Take(key, now, r, 1); d.Allowed {
		t.Fatalf("admitted past the capacity with c's lease out: %+v", d)
	}
}

// A key whose state is on its way here (its partition incoming: a join
// pulled it, a leave pushes it) is granted nothing: a debit taken from
// the state held now would be lost to the merge with the state that
// arrives, which keeps the larger consumption (over-admission, seen on
// real processes when a lessee asked a joining node before its pull was
// answered).
func TestLeaseNotGrantedWhileTheStateIsOnItsWay(t *testing.T) {
	mv, h, clk, key, _ := leaseOwner(t)
	r := rule(limit.TokenBucket, 10, time.Hour)
	p := h.v.snap.PartitionOf(uniqueKeyOf(key))
	h.ho.mu.Lock()
	h.ho.setLocked(p, partIncoming, partDetail{from: h.member("b"), done: make(chan struct{})})
	h.ho.mu.Unlock()
	g, err := mv.lease(context.Background(), limit.LeaseRequest{From: "b", Key: key, Rule: r, Want: 4})
	if err != nil || g.Hits != 0 || g.Deny != 0 || g.NotOwner != "" {
		t.Fatalf("grant for an incoming key: %+v, %v; want nothing", g, err)
	}
	if d := h.tbl[limit.TokenBucket].Take(key, clk.Now().UnixNano(), r, 0); d.Remaining != 10 {
		t.Fatalf("the key was debited by a lease that granted nothing: %+v", d)
	}
	h.ho.mu.Lock()
	h.ho.setLocked(p, partNormal, partDetail{})
	h.ho.mu.Unlock()
	if g, err := mv.lease(context.Background(), limit.LeaseRequest{From: "b", Key: key, Rule: r, Want: 4}); err != nil || g.Hits != 4 {
		t.Fatalf("grant once the state is here: %+v, %v; want 4 hits", g, err)
	}
}

// The owner's inspection lists its outstanding grants of a key, pooled per
// lessee, sorted, until they end; a release removes them.
func TestLeaseGrantsInspected(t *testing.T) {
	mv, _, clk, key, _ := leaseOwner(t)
	r := rule(limit.TokenBucket, 100, time.Hour)
	var ids []uint64
	for _, from := range []string{"c", "b", "b"} {
		g, err := mv.lease(context.Background(), limit.LeaseRequest{From: from, Key: key, Rule: r, Want: 5})
		if err != nil || g.Hits != 5 {
			t.Fatalf("grant to %s: %+v, %v", from, g, err)
		}
		ids = append(ids, g.ID)
	}
	now := clk.Now().UnixNano()
	got := mv.leases.grantsOf(key, now)
	end := now + int64(leaseTTL)
	want := []limit.LeaseView{{Lessee: "b", Hits: 10, Expires: end}, {Lessee: "c", Hits: 5, Expires: end}}
	if !slices.Equal(got, want) {
		t.Fatalf("leases of the key: %+v, want %+v", got, want)
	}
	if _, err := mv.lease(context.Background(), limit.LeaseRequest{From: "c", Key: key, Rule: r, Release: ids[0], Leftover: 5}); err != nil {
		t.Fatal(err)
	}
	if got := mv.leases.grantsOf(key, now); !slices.Equal(got, want[:1]) {
		t.Errorf("after c's release: %+v, want %+v", got, want[:1])
	}
	if got := mv.leases.grantsOf(key, end); len(got) != 0 {
		t.Errorf("once the grants ended: %+v, want none", got)
	}
}

// TestNoLeaseCallStartsOnceStopped: a check still in flight as the node's
// run ends (its lease calls awaited, Run's lh.wait) may pass the lease
// threshold; it starts no call then (a WaitGroup Add beside its Wait is a
// data race, seen once under -race when a lessee was crashed with its
// callers' checks in flight).
func TestNoLeaseCallStartsOnceStopped(t *testing.T) {
	t.Parallel()
	n, err := New(Config{Name: "a", Leases: true, LeaseThreshold: 1})
	if err != nil {
		t.Fatal(err)
	}
	lh := n.lh
	e := &heldKey{key: "k", rule: limit.Rule{Algorithm: limit.TokenBucket, Limit: 10, Period: time.Second}}
	e.rate.Store(1000)
	lh.wait()
	lh.renew(e, ring.Member{Name: "b", Addr: "127.0.0.1:1", PeerAddr: "127.0.0.1:1"}, 1)
	lh.wg.Wait() // a call started anyway ends here
	if e.busy.Load() || e.ask.Load() != 0 {
		t.Fatalf("a lease call ran after the holder stopped (busy %v, next ask at %d)", e.busy.Load(), e.ask.Load())
	}
}
