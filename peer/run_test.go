package peer

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shardlimiter/shardlimiter/internal/poll"
	"github.com/shardlimiter/shardlimiter/limit"
	"github.com/shardlimiter/shardlimiter/ring"
)

// failingGossip fails to start, as Membership.Run does when its port is taken.
type failingGossip struct{ err error }

func (g failingGossip) Run(context.Context) error { return g.err }
func (g failingGossip) Members() []ring.Member    { return nil }
func (g failingGossip) Changed() <-chan struct{}  { return nil }
func (g failingGossip) Joined() bool              { return false }
func (g failingGossip) Leave(time.Duration) error { return nil }

// A gossip that cannot start must end Run with its error, and the ring
// watcher and sweeper it started must stop with it: otherwise the server
// never learns of the failure and serves, unready, forever.
func TestRunReturnsGossipStartError(t *testing.T) {
	t.Parallel()
	want := errors.New("bind: address already in use")
	n, err := New(Config{Name: "a", Gossip: failingGossip{want}})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- n.Run(context.Background()) }()
	select {
	case err := <-done:
		if !errors.Is(err, want) {
			t.Fatalf("Run() = %v, want %v", err, want)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after gossip failed to start")
	}
}

// leavingGossip has members a and b until a leaves; then b alone, as
// Membership.Members no longer lists a node that has left.
type leavingGossip struct {
	changed chan struct{}
	left    atomic.Bool
	reads   atomic.Int64 // calls of Members
}

func (g *leavingGossip) Run(ctx context.Context) error { <-ctx.Done(); return nil }
func (g *leavingGossip) Members() []ring.Member {
	g.reads.Add(1)
	if g.left.Load() {
		return []ring.Member{{Name: "b", Addr: "b:1"}}
	}
	return []ring.Member{{Name: "a", Addr: "a:1"}, {Name: "b", Addr: "b:1"}}
}
func (g *leavingGossip) Changed() <-chan struct{} { return g.changed }
func (g *leavingGossip) Joined() bool             { return true }
func (g *leavingGossip) Leave(time.Duration) error {
	g.left.Store(true)
	return nil
}

// A membership rebuild that read the member list before Leave must not
// install its ring after Leave's: the leaving node would own its keys again
// (deciding them here while the others route them elsewhere) until the next
// membership change, which may never come.
func TestLeaveIsNotUndoneByAConcurrentRebuild(t *testing.T) {
	t.Parallel()
	for i := range 100 {
		g := &leavingGossip{changed: make(chan struct{}, 1)}
		n, err := New(Config{Name: "a", GRPCAddr: "a:1", Gossip: g})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- n.Run(ctx) }()
		g.changed <- struct{}{}
		// Leave while the watcher builds the ring of a and b.
		for deadline := time.Now().Add(5 * time.Second); g.reads.Load() == 0 && time.Now().Before(deadline); {
			runtime.Gosched()
		}
		if err := n.Leave(); err != nil {
			t.Fatal(err)
		}
		cancel() // Run returns after the watcher's rebuild
		<-done
		if v := n.view.Load(); v.self >= 0 {
			t.Fatalf("iteration %d: after Leave the ring is %v (version %d), still holding the leaving node",
				i, names(v.snap.Members()), v.snap.Version())
		}
	}
}

// joiningGossip is the membership of node a, alone, that has seeds it has
// not joined until joined is set.
type joiningGossip struct {
	changed chan struct{}
	joined  atomic.Bool
}

func (g *joiningGossip) Run(ctx context.Context) error { <-ctx.Done(); return nil }
func (g *joiningGossip) Members() []ring.Member {
	return []ring.Member{{Name: "a", Addr: "a:1"}}
}
func (g *joiningGossip) Changed() <-chan struct{}  { return g.changed }
func (g *joiningGossip) Joined() bool              { return g.joined.Load() }
func (g *joiningGossip) Leave(time.Duration) error { return nil }

// A node (re)started beside a running cluster holds a ring of itself until
// it has joined: deciding its client checks as their owner would count
// them twice, once here and once on the cluster's owner, uncounted. They
// follow the fail policy, counted, until it has joined; then the node
// decides again.
func TestChecksBeforeJoiningFollowTheFailPolicy(t *testing.T) {
	t.Parallel()
	g := &joiningGossip{changed: make(chan struct{}, 1)}
	n, err := New(Config{Name: "a", GRPCAddr: "a:1", Gossip: g, FailPolicy: FailClosed})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- n.Run(ctx) }()
	defer func() { cancel(); <-done }()
	g.changed <- struct{}{}
	poll.Until(t, 5*time.Second, func() bool { return n.view.Load().self >= 0 }, "%s", "the ring of a alone")

	chk := []limit.Check{{Name: "r", Key: "k", Hits: 1, Rule: rule(limit.TokenBucket, 5, time.Minute)}}
	res, err := n.Check(context.Background(), chk)
	if err != nil || res[0].Reason != limit.Unavailable || !strings.Contains(res[0].Error, "not joined") {
		t.Fatalf("check before joining = %+v, %v; want an unavailable item error (fail-closed)", res, err)
	}
	if got := counterValue(n.m.fallback[FailClosed]); got != 1 {
		t.Fatalf("fail-closed decisions = %v, want 1", got)
	}
	if n.Ready() {
		t.Fatal("a node that has not joined reports ready")
	}

	g.joined.Store(true)
	res, err = n.Check(context.Background(), chk)
	if err != nil || res[0].Error != "" || !res[0].Allowed || res[0].Remaining != 4 {
		t.Fatalf("check after joining = %+v, %v; want decided here, remaining 4", res, err)
	}
	if got := counterValue(n.m.fallback[FailClosed]); got != 1 {
		t.Fatalf("fail-closed decisions after joining = %v, want still 1", got)
	}
}
