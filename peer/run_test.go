package peer

import (
	"context"
	"errors"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

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
