package peer

import (
	"context"
	"errors"
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
