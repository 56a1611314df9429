package client

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shardlimiter/shardlimiter/api/lease"
	"github.com/shardlimiter/shardlimiter/api/native"
	"github.com/shardlimiter/shardlimiter/internal/poll"
	"github.com/shardlimiter/shardlimiter/limit"
	"github.com/shardlimiter/shardlimiter/transport"
	"github.com/shardlimiter/shardlimiter/transport/server"
)

// fakeGranter grants leases from a budget of hits, as an owner debits
// them, and records what comes back. With notOwner set it answers every
// call NotOwner naming it; with deny, a deny lease of that length.
type fakeGranter struct {
	name     string
	notOwner string
	deny     time.Duration
	budget   atomic.Int64
	calls    atomic.Int64
	movedTo  atomic.Value // string: from now on, answer NotOwner naming it (the key moved)
	// bounceTo, bounces: answer the next bounces calls NotOwner naming
	// bounceTo (a new owner whose ring does not give it the key yet).
	bounceTo string
	bounces  atomic.Int64

	mu       sync.Mutex
	from     map[string]bool
	released int64
	ids      uint64
}

func (g *fakeGranter) Lease(_ context.Context, r limit.LeaseRequest) (limit.LeaseGrant, error) {
	g.calls.Add(1)
	if g.notOwner != "" {
		return limit.LeaseGrant{NotOwner: g.notOwner}, nil
	}
	if to, _ := g.movedTo.Load().(string); to != "" {
		return limit.LeaseGrant{NotOwner: to}, nil
	}
	if g.bounces.Add(-1) >= 0 {
		return limit.LeaseGrant{NotOwner: g.bounceTo}, nil
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if !r.Client || !strings.HasPrefix(r.From, "addr:127.0.0.1/") {
		return limit.LeaseGrant{}, errors.New("not a client lessee named by its address")
	}
	if g.from == nil {
		g.from = map[string]bool{}
	}
	g.from[r.From] = true
	var out limit.LeaseGrant
	if r.Release != 0 {
		g.released += r.Leftover
		g.budget.Add(r.Leftover)
		out.Credited = r.Leftover
	}
	if r.Want == 0 {
		return out, nil
	}
	if g.deny > 0 {
		out.Deny = g.deny
		return out, nil
	}
	n := min(r.Want, g.budget.Load())
	if n <= 0 {
		return out, nil
	}
	g.budget.Add(-n)
	g.ids++
	out.ID, out.Hits, out.TTL = g.ids, n, 500*time.Millisecond
	return out, nil
}

func (g *fakeGranter) releasedHits() int64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.released
}

// leaseCluster starts fake nodes serving the ring, RateLimiter (answered
// by fakeNode) and the lease service with access, each granted by its
// fakeGranter.
func leaseCluster(t testing.TB, n int, access lease.Access, log *slog.Logger) (*fakeCluster, []*fakeGranter, []*lease.Service) {
	c := &fakeCluster{}
	var gs []*fakeGranter
	var svcs []*lease.Service
	for i := range n {
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		fn := &fakeNode{name: string(rune('a' + i)), addr: lis.Addr().String(), done: make(chan struct{})}
		g := &fakeGranter{name: fn.name}
		fn.srv = server.NewClientListener(server.Config{})
		native.Register(fn.srv, fn, c)
		svcs = append(svcs, lease.Register(fn.srv, g, lease.Config{Access: access, Logger: log}))
		go func() { defer close(fn.done); fn.srv.Serve(lis) }()
		c.nodes, gs = append(c.nodes, fn), append(gs, g)
		t.Cleanup(fn.stop)
	}
	c.setMembers(c.nodes...)
	return c, gs, svcs
}

func leaseCheck(key string, limitPerSec int64) limit.Check {
	return limit.Check{Name: "hot", Key: key, Hits: 1,
		Rule: limit.Rule{Algorithm: limit.TokenBucket, Limit: limitPerSec, Period: time.Second}}
}

// waitRing waits until c routes by a ring of n members.
func waitRing(t testing.TB, c *Client, n int) {
	poll.Until(t, 5*time.Second, func() bool { return len(c.Members()) == n }, "the client has the ring")
}

// TestLeaseDecidesInProcess: a hot key is decided in the client from a
// lease of its owner; the owner's answers stop growing meanwhile, every
// hit decided locally came out of a grant, and Close gives back exactly
// what the client did not spend.
func TestLeaseDecidesInProcess(t *testing.T) {
	t.Parallel()
	fc, gs, _ := leaseCluster(t, 3, lease.Anyone, nil)
	for _, g := range gs {
		g.budget.Store(1_000_000)
	}
	c, err := New(testCtx(t), Config{Targets: fc.addrs()[:1], Leases: true, LeaseThreshold: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	waitRing(t, c, 3)
	chk := leaseCheck("account:1", 1_000_000)
	owner := fc.ring(t).Owner(chk.Key).Name
	var g *fakeGranter
	for _, x := range gs {
		if x.name == owner {
			g = x
		}
	}
	poll.Until(t, 10*time.Second, func() bool {
		r, err := c.Check(testCtx(t), chk)
		if err != nil || !r.Allowed || r.Owner != owner {
			t.Fatalf("Check(%q) = %+v, %v; want allowed by %s", chk.Key, r, err, owner)
		}
		return c.LeaseStats().Decided > 1000
	}, "checks decided from a lease")
	for _, n := range fc.nodes {
		if n.name != owner {
			if _, keys := n.got(); len(keys) != 0 {
				t.Errorf("node %s got %d checks of a key it does not own", n.name, len(keys))
			}
		}
	}
	if st := c.LeaseStats(); st.Granted == 0 || st.Err != nil {
		t.Fatalf("LeaseStats = %+v: want grants, no error", st)
	}
	c.Close()
	// Every hit granted was either decided here or given back at Close.
	st := c.LeaseStats()
	if spent := 1_000_000 - g.budget.Load(); st.Held != 0 || g.releasedHits() == 0 || spent != int64(st.Decided) {
		t.Errorf("after Close: LeaseStats %+v, %d released, the owner is short of %d; want the %d decided only",
			st, g.releasedHits(), spent, st.Decided)
	}
	if len(g.from) != 1 {
		t.Errorf("lessees %v, want one name for the client", g.from)
	}
}

// TestLeaseDenyRefusesLocally: a deny lease refuses the key's checks in
// the client until it ends, without asking the owner.
func TestLeaseDenyRefusesLocally(t *testing.T) {
	t.Parallel()
	fc, gs, _ := leaseCluster(t, 1, lease.Anyone, nil)
	gs[0].deny = time.Minute
	c := newClient(t, Config{Targets: fc.addrs(), Leases: true, LeaseThreshold: 1})
	waitRing(t, c, 1)
	chk := leaseCheck("k", 10)
	poll.Until(t, 10*time.Second, func() bool {
		_, _ = c.Check(testCtx(t), chk)
		return c.LeaseStats().Denied > 0
	}, "a deny lease")
	_, before := fc.nodes[0].got()
	calls := gs[0].calls.Load()
	for range 100 {
		r, err := c.Check(testCtx(t), chk)
		if err != nil || r.Allowed || r.RetryAfter <= 0 {
			t.Fatalf("Check under a deny lease = %+v, %v; want refused with RetryAfter", r, err)
		}
	}
	if _, after := fc.nodes[0].got(); len(after) != len(before) || gs[0].calls.Load() != calls {
		t.Errorf("under a deny lease the node got %d checks and %d lease calls, want 0", len(after)-len(before), gs[0].calls.Load()-calls)
	}
}

// TestLeaseRefusedWithoutPermission: a node that does not allow client
// leases refuses with PermissionDenied, logs it and counts it; the
// client's checks still go to the owner, and it stops asking.
func TestLeaseRefusedWithoutPermission(t *testing.T) {
	t.Parallel()
	var buf syncBuffer
	fc, gs, svcs := leaseCluster(t, 1, lease.Nobody, slog.New(slog.NewTextHandler(&buf, nil)))
	gs[0].budget.Store(1_000_000)
	c := newClient(t, Config{Targets: fc.addrs(), Leases: true, LeaseThreshold: 1})
	waitRing(t, c, 1)
	chk := leaseCheck("k", 1_000_000)
	poll.Until(t, 10*time.Second, func() bool {
		r, err := c.Check(testCtx(t), chk)
		if err != nil || !r.Allowed {
			t.Fatalf("Check = %+v, %v; want allowed by the node", r, err)
		}
		return c.LeaseStats().Err != nil
	}, "a lease call refused")
	if st := c.LeaseStats(); !errors.Is(st.Err, transport.ErrPermissionDenied) || st.Decided != 0 || st.Granted != 0 {
		t.Errorf("LeaseStats = %+v; want PermissionDenied and nothing decided", st)
	}
	if n := svcs[0].Counts().Refused; n == 0 {
		t.Errorf("Counts().Refused = 0, want the refusal counted")
	}
	if s := buf.String(); !strings.Contains(s, "client lease refused") || !strings.Contains(s, "--client-leases") {
		t.Errorf("log = %q; want the refusal and how to allow it", s)
	}
	calls := svcs[0].Counts().Refused
	for range 200 {
		_, _ = c.Check(testCtx(t), chk)
	}
	if n := svcs[0].Counts().Refused; n != calls || gs[0].calls.Load() != 0 {
		t.Errorf("after a refusal the client asked %d more times (granter saw %d), want 0", n-calls, gs[0].calls.Load())
	}
}

// TestLeaseNotOwnerReroutes: the node the client's ring names as owner
// answers NotOwner naming another; the client asks that one, which
// grants, and decides from its lease.
func TestLeaseNotOwnerReroutes(t *testing.T) {
	t.Parallel()
	fc, gs, svcs := leaseCluster(t, 3, lease.Anyone, nil)
	c := newClient(t, Config{Targets: fc.addrs()[:1], Leases: true, LeaseThreshold: 1})
	waitRing(t, c, 3)
	chk := leaseCheck("account:7", 1_000_000)
	owner := fc.ring(t).OwnerIndex(chk.Key)
	other := (owner + 1) % 3
	gs[owner].notOwner = gs[other].name
	gs[other].budget.Store(1_000_000)
	poll.Until(t, 10*time.Second, func() bool {
		_, _ = c.Check(testCtx(t), chk)
		return c.LeaseStats().Decided > 0
	}, "checks decided from the re-routed lease")
	r, err := c.Check(testCtx(t), chk)
	if err != nil || !r.Allowed || r.Owner != gs[other].name {
		t.Errorf("Check = %+v, %v; want allowed under %s's lease", r, err, gs[other].name)
	}
	if svcs[owner].Counts().NotOwner == 0 || svcs[other].Counts().Granted == 0 {
		t.Errorf("counts: ring owner %+v, named owner %+v; want not_owner then granted", svcs[owner].Counts(), svcs[other].Counts())
	}
}

// TestLeaseReleaseFollowsTheKey: the key moves while the client holds a
// lease of it (its grantor answers NotOwner from then on, naming the new
// owner, which holds the grant's record with the key's state): what the
// client did not spend is released to the new owner, not dropped, even
// when the new owner names the old one back for a moment.
func TestLeaseReleaseFollowsTheKey(t *testing.T) {
	t.Parallel()
	fc, gs, _ := leaseCluster(t, 3, lease.Anyone, nil)
	c := newClient(t, Config{Targets: fc.addrs()[:1], Leases: true, LeaseThreshold: 1})
	waitRing(t, c, 3)
	chk := leaseCheck("account:9", 1_000_000)
	owner := fc.ring(t).OwnerIndex(chk.Key)
	next := (owner + 1) % 3
	gs[owner].budget.Store(1_000_000)
	poll.Until(t, 10*time.Second, func() bool {
		_, _ = c.Check(testCtx(t), chk)
		return c.LeaseStats().Held > 0
	}, "a lease of the owner")
	// The new owner names the old one back at its first call, as
	// while its ring lags: the release asks again.
	gs[next].bounceTo = gs[owner].name
	gs[next].bounces.Store(1)
	gs[owner].movedTo.Store(gs[next].name)
	poll.Until(t, 5*time.Second, func() bool { return c.LeaseStats().Held == 0 }, "the lease ends")
	poll.Until(t, 5*time.Second, func() bool { return gs[next].releasedHits() > 0 && c.LeaseStats().Released > 0 },
		"the leftover released to the key's new owner")
	if got := gs[owner].releasedHits(); got != 0 {
		t.Errorf("%d hits released to the old owner, which no longer decides the key", got)
	}
}

// syncBuffer is a bytes.Buffer safe for a logger and a reader.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestLeaseExpiryGivesBack: a lease the client stops using ends at its
// expiry, and what is left of it goes back to the owner.
func TestLeaseExpiryGivesBack(t *testing.T) {
	t.Parallel()
	fc, gs, _ := leaseCluster(t, 1, lease.Anyone, nil)
	gs[0].budget.Store(1_000_000)
	c := newClient(t, Config{Targets: fc.addrs(), Leases: true, LeaseThreshold: 1})
	waitRing(t, c, 1)
	chk := leaseCheck("k", 1_000_000)
	poll.Until(t, 10*time.Second, func() bool {
		_, _ = c.Check(testCtx(t), chk)
		return c.LeaseStats().Held > 0
	}, "a lease")
	poll.Until(t, 5*time.Second, func() bool { st := c.LeaseStats(); return st.Held == 0 && st.Released > 0 }, "the lease expires and is given back")
	st := c.LeaseStats()
	if left := 1_000_000 - gs[0].budget.Load(); st.Released == 0 || left != int64(st.Decided) {
		t.Errorf("after expiry: LeaseStats %+v, the owner is short of %d; want a release leaving exactly the %d decided spent",
			st, left, st.Decided)
	}
}

// TestLeaseConservationUnderConcurrency: 16 goroutines check one key
// while leases are granted, renewed, spent, expired and given back, until
// the owner's budget is gone; once the client is closed, the owner is
// short of exactly the hits the client decided from leases: none is
// admitted twice, none lost. Run with -race.
func TestLeaseConservationUnderConcurrency(t *testing.T) {
	t.Parallel()
	fc, gs, _ := leaseCluster(t, 1, lease.Anyone, nil)
	const budget = 20_000
	gs[0].budget.Store(budget)
	c, err := New(testCtx(t), Config{Targets: fc.addrs(), Leases: true, LeaseThreshold: 1})
	if err != nil {
		t.Fatal(err)
	}
	waitRing(t, c, 1)
	chk := leaseCheck("k", 1_000_000)
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for range 16 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := c.Check(context.Background(), chk); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	poll.Until(t, 20*time.Second, func() bool { return gs[0].budget.Load() < budget/10 }, "the budget spent")
	close(stop)
	wg.Wait()
	c.Close()
	st := c.LeaseStats()
	if spent := budget - gs[0].budget.Load(); spent != int64(st.Decided) || st.Held != 0 {
		t.Fatalf("the owner is short of %d, the client decided %d from leases (holding %d): want equal, none held", spent, st.Decided, st.Held)
	}
	t.Logf("%d decided from %d grants, %d releases", st.Decided, st.Granted, st.Released)
}

// TestLeaseCheckBatch: in a batch, a check a lease decides is answered in
// the client; a chained group (even its last, unchained check) and a
// peek go to the owner, and the answers keep the batch's order.
func TestLeaseCheckBatch(t *testing.T) {
	t.Parallel()
	fc, gs, _ := leaseCluster(t, 1, lease.Anyone, nil)
	gs[0].budget.Store(1_000_000)
	c := newClient(t, Config{Targets: fc.addrs(), Leases: true, LeaseThreshold: 1})
	waitRing(t, c, 1)
	hot := leaseCheck("hot", 1_000_000)
	poll.Until(t, 10*time.Second, func() bool {
		_, _ = c.Check(testCtx(t), hot)
		return c.LeaseStats().Held > 0
	}, "a lease")
	// The chained group holds the hot key itself: only a group's
	// members may never be decided alone.
	g1, g2, peek := hot, hot, leaseCheck("cold", 1_000_000)
	g1.Chained, peek.Hits = true, 0
	_, before := fc.nodes[0].got()
	decided := c.LeaseStats().Decided
	res, err := c.CheckBatch(testCtx(t), []limit.Check{hot, g1, g2, peek, hot})
	if err != nil || len(res) != 5 {
		t.Fatalf("CheckBatch = %d results, %v", len(res), err)
	}
	for i, r := range res {
		if !r.Allowed && i != 3 {
			t.Errorf("item %d = %+v, want allowed", i, r)
		}
	}
	_, after := fc.nodes[0].got()
	if sent := after[len(before):]; len(sent) != 3 || sent[0] != "hot" || sent[1] != "hot" || sent[2] != "cold" {
		t.Errorf("the node got %q, want the group's two checks and the peek", sent)
	}
	if d := c.LeaseStats().Decided - decided; d != 2 {
		t.Errorf("%d checks of the batch decided from the lease, want 2", d)
	}
}
