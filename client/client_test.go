package client

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/shardlimiter/shardlimiter/internal/poll"
	"github.com/shardlimiter/shardlimiter/limit"
	"github.com/shardlimiter/shardlimiter/ring"
)

// owners returns the ring the fake cluster reports, as nodes build it.
func (c *fakeCluster) ring(t *testing.T) *ring.Snapshot {
	t.Helper()
	m := c.Membership()
	var ms []ring.Member
	for _, mb := range m.Members {
		ms = append(ms, ring.Member{Name: mb.Name, Addr: mb.Addr})
	}
	snap, err := ring.New(ms, m.Version, m.Config)
	if err != nil {
		t.Fatal(err)
	}
	return snap
}

func TestClientSendsToOwners(t *testing.T) {
	t.Parallel()
	fc := newFakeCluster(t, 3, true)
	c := newClient(t, Config{Targets: fc.addrs()[:1]})
	snap := fc.ring(t)
	for i := range 60 {
		key := fmt.Sprintf("account:%d", i)
		r, err := c.Check(testCtx(t), mkCheck(key, 1))
		if err != nil || !r.Allowed {
			t.Fatalf("Check(%q) = %+v, %v; want allowed", key, r, err)
		}
		if want := snap.Owner(key).Name; r.Owner != want {
			t.Errorf("Check(%q) answered by %s, want its owner %s", key, r.Owner, want)
		}
	}
	// A batch is split by owner and answered in order.
	var checks []limit.Check
	for i := range 50 {
		checks = append(checks, mkCheck(fmt.Sprintf("k%d", i), int64(i%12)))
	}
	res, err := c.CheckBatch(testCtx(t), checks)
	if err != nil || len(res) != len(checks) {
		t.Fatalf("CheckBatch = %d results, %v", len(res), err)
	}
	for i, r := range res {
		if want := snap.Owner(checks[i].Key).Name; r.Owner != want || r.Allowed != (checks[i].Hits <= 10) {
			t.Errorf("CheckBatch item %d (%s, %d hits) = %+v, want owner %s", i, checks[i].Key, checks[i].Hits, r, want)
		}
	}
}

func TestClientWithoutRing(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		serveRing bool
		noRouting bool
	}{{"not served", false, false}, {"NoRouting", true, true}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			fc := newFakeCluster(t, 2, tc.serveRing)
			c := newClient(t, Config{Targets: fc.addrs()[:1], NoRouting: tc.noRouting})
			for i := range 20 {
				r, err := c.Check(testCtx(t), mkCheck(fmt.Sprintf("k%d", i), 1))
				if err != nil || r.Owner != "a" {
					t.Fatalf("Check = %+v, %v; want answered by the target a", r, err)
				}
			}
		})
	}
}

// Concurrent calls to a busy node leave together; each gets its own answer.
func TestClientCoalesces(t *testing.T) {
	t.Parallel()
	fc := newFakeCluster(t, 1, true)
	n := fc.nodes[0]
	n.gate = make(chan struct{})
	c := newClient(t, Config{Targets: fc.addrs(), MaxInFlight: 1})

	first := make(chan error, 1)
	go func() { _, err := c.Check(testCtx(t), mkCheck("first", 1)); first <- err }()
	poll.Until(t, 5*time.Second, func() bool { b, _ := n.got(); return len(b) == 1 }, "first RPC reaches the node")

	const callers, each = 64, 20
	var wg sync.WaitGroup
	for g := range callers {
		wg.Go(func() {
			for i := range each {
				key := fmt.Sprintf("g%d-%d", g, i)
				hits := int64((g + i) % 12)
				r, err := c.Check(testCtx(t), mkCheck(key, hits))
				if err != nil || r.Allowed != (hits <= 10) || r.Remaining != max(0, 10-hits) {
					t.Errorf("Check(%s, %d) = %+v, %v", key, hits, r, err)
				}
			}
		})
	}
	// Let the callers queue behind the held RPC, then release everything.
	poll.Until(t, 5*time.Second, func() bool { return c.pending() >= callers/2 }, "callers queue while the only slot is busy")
	close(n.gate)
	wg.Wait()
	if err := <-first; err != nil {
		t.Fatalf("first Check = %v", err)
	}
	batches, keys := n.got()
	if len(keys) != callers*each+1 {
		t.Fatalf("node decided %d checks, want %d", len(keys), callers*each+1)
	}
	if len(batches) >= callers*each/2 {
		t.Errorf("%d checks took %d RPCs: not merged", len(keys), len(batches))
	}
	t.Logf("%d checks in %d RPCs", len(keys), len(batches))
}

// pending returns the checks accepted and not yet answered (for tests).
func (c *Client) pending() int {
	return int(c.inflight.Load())
}

func TestClientContext(t *testing.T) {
	t.Parallel()
	fc := newFakeCluster(t, 1, true)
	fc.nodes[0].gate = make(chan struct{}) // never answers
	c := newClient(t, Config{Targets: fc.addrs(), Timeout: time.Minute})

	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := c.Check(ctx, mkCheck("k", 1)); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Check past its deadline = %v, want context.DeadlineExceeded", err)
	}
	ctx, cancel = context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { _, err := c.CheckBatch(ctx, []limit.Check{mkCheck("x", 1), mkCheck("y", 1)}); done <- err }()
	poll.Until(t, 5*time.Second, func() bool { return c.pending() > 0 }, "CheckBatch in flight")
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("canceled CheckBatch = %v, want context.Canceled", err)
	}
}

// Close answers every accepted call, queued or in flight, and refuses new ones.
func TestClientCloseAnswersAll(t *testing.T) {
	t.Parallel()
	fc := newFakeCluster(t, 2, true)
	for _, n := range fc.nodes {
		n.gate = make(chan struct{}) // never answers
	}
	c := newClient(t, Config{Targets: fc.addrs(), MaxInFlight: 2, Timeout: time.Minute})
	const calls = 100
	errs := make(chan error, calls)
	for i := range calls {
		go func() { _, err := c.Check(context.Background(), mkCheck(fmt.Sprintf("k%d", i), 1)); errs <- err }()
	}
	poll.Until(t, 5*time.Second, func() bool { return c.pending() == calls }, "all calls accepted")
	if err := c.Close(); err != nil {
		t.Errorf("Close = %v", err)
	}
	for range calls {
		if err := <-errs; !errors.Is(err, ErrClosed) {
			t.Errorf("Check accepted before Close = %v, want ErrClosed", err)
		}
	}
	if _, err := c.Check(context.Background(), mkCheck("late", 1)); !errors.Is(err, ErrClosed) {
		t.Errorf("Check after Close = %v, want ErrClosed", err)
	}
	if err := c.Close(); err != nil {
		t.Errorf("second Close = %v", err)
	}
}

// An owner that goes down costs its callers nothing: its checks go to a
// live node (which, in a real cluster, forwards or decides them).
func TestClientOwnerDown(t *testing.T) {
	t.Parallel()
	fc := newFakeCluster(t, 3, true)
	c := newClient(t, Config{Targets: fc.addrs()})
	snap := fc.ring(t)
	dead := fc.nodes[1]
	dead.stop()
	for i := range 60 {
		key := fmt.Sprintf("account:%d", i)
		r, err := c.Check(testCtx(t), mkCheck(key, 1))
		if err != nil {
			t.Fatalf("Check(%q) with owner %s = %v; want an answer from a live node", key, snap.Owner(key).Name, err)
		}
		if r.Owner == dead.name {
			t.Fatalf("Check(%q) answered by the dead node", key)
		}
	}
	// Once the ring drops it, the client routes on the new ring.
	fc.setMembers(fc.nodes[0], fc.nodes[2])
	poll.Until(t, 5*time.Second, func() bool { r := c.routes.Load(); return r != nil && r.snap.Len() == 2 }, "client ring drops the dead node")
	snap = fc.ring(t)
	for i := range 30 {
		key := fmt.Sprintf("account:%d", i)
		if r, err := c.Check(testCtx(t), mkCheck(key, 1)); err != nil || r.Owner != snap.Owner(key).Name {
			t.Fatalf("Check(%q) = %+v, %v; want owner %s", key, r, err, snap.Owner(key).Name)
		}
	}
}

func TestClientAllDown(t *testing.T) {
	t.Parallel()
	fc := newFakeCluster(t, 2, true)
	c := newClient(t, Config{Targets: fc.addrs()})
	for _, n := range fc.nodes {
		n.stop()
	}
	if _, err := c.Check(testCtx(t), mkCheck("k", 1)); !errors.Is(err, ErrUnavailable) {
		t.Errorf("Check with every node down = %v, want ErrUnavailable", err)
	}
}

func TestNewConfigError(t *testing.T) {
	if _, err := New(context.Background(), Config{}); err == nil {
		t.Error("New with no targets succeeded")
	}
}
