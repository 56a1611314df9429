package peer

import (
	"context"
	"fmt"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shardlimiter/shardlimiter/limit"
	"github.com/shardlimiter/shardlimiter/ring"
	"github.com/shardlimiter/shardlimiter/transport"
	"github.com/shardlimiter/shardlimiter/transport/dial"
)

// fixedGossip is a membership that never changes.
type fixedGossip struct{ members []ring.Member }

func (g fixedGossip) Run(ctx context.Context) error { <-ctx.Done(); return nil }
func (g fixedGossip) Members() []ring.Member        { return g.members }
func (g fixedGossip) Changed() <-chan struct{}      { return nil }
func (g fixedGossip) Joined() bool                  { return true }
func (g fixedGossip) Leave(time.Duration) error     { return nil }

// TestHungOwnerIsSuspended: an owner that accepts forwards but never
// answers costs the first check one peer timeout; the checks after it, while
// the owner is suspended, go straight to the fail policy without reaching
// it. Every check is answered without an item error (local policy).
func TestHungOwnerIsSuspended(t *testing.T) {
	t.Parallel()
	var calls atomic.Int64
	release := make(chan struct{})
	hung := peerListener(transport.CheckerFunc(
		func(ctx context.Context, checks []limit.Check) ([]limit.Result, error) {
			calls.Add(1)
			select {
			case <-release:
			case <-ctx.Done():
			}
			return nil, ctx.Err()
		}))
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go hung.Serve(lis)
	defer hung.Stop()
	defer close(release)

	members := []ring.Member{{Name: "self", Addr: "unused"}, {Name: "hung", Addr: lis.Addr().String()}}
	n, err := New(Config{Name: "self", Gossip: fixedGossip{members}, PeerBackoff: time.Hour,
		Peer: dial.PeerConfig{Timeout: 200 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	defer n.peers.closeAll() // Run (not started here) would close them
	if err := n.rebuild(members); err != nil {
		t.Fatal(err)
	}
	var keys []string
	for i := 0; len(keys) < 5; i++ {
		k := "account:" + string(rune('a'+i%26)) + string(rune('a'+i/26))
		if n.view.Load().snap.Owner(k).Name == "hung" {
			keys = append(keys, k)
		}
	}
	for i, k := range keys {
		res, err := n.Check(context.Background(), []limit.Check{{Name: "r", Key: k, Hits: 1, Rule: rule(limit.TokenBucket, 5, time.Minute)}})
		if err != nil || res[0].Error != "" || !res[0].Allowed || res[0].Owner != "self" {
			t.Fatalf("check %d on a key of the hung owner = %+v, %v; want admitted locally", i, res, err)
		}
	}
	// 1, or 0 on a loaded machine where the first forward's 200 ms ran out
	// before its connection was up: that failure suspends the owner too.
	if got := calls.Load(); got > 1 {
		t.Fatalf("the hung owner received %d forwards, want at most 1: the others should have been suspended", got)
	}
}

// TestFallbackDecidesAtItsOwnTime: a check whose owner hangs is decided by
// the fail policy when its forward times out, at the time of that
// decision, not at the time the batch started. Deciding at the older time
// against state other batches have moved on made keys with a limit of 1e9
// per second answer OVER_LIMIT while an owner was frozen.
func TestFallbackDecidesAtItsOwnTime(t *testing.T) {
	t.Parallel()
	called := make(chan struct{}, 1)
	hung := peerListener(transport.CheckerFunc(
		func(ctx context.Context, checks []limit.Check) ([]limit.Result, error) {
			select {
			case called <- struct{}{}:
			default:
			}
			<-ctx.Done()
			return nil, ctx.Err()
		}))
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go hung.Serve(lis)
	defer hung.Stop()

	clk := newClock()
	members := []ring.Member{{Name: "self", Addr: "unused"}, {Name: "hung", Addr: lis.Addr().String()}}
	n, err := New(Config{Name: "self", Now: clk.Now, Gossip: fixedGossip{members},
		Peer: dial.PeerConfig{Timeout: 300 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	defer n.peers.closeAll()
	if err := n.rebuild(members); err != nil {
		t.Fatal(err)
	}
	var key string
	for i := 0; key == ""; i++ {
		if k := fmt.Sprint("account:", i); n.view.Load().snap.Owner(k).Name == "hung" {
			key = k
		}
	}
	fast := rule(limit.TokenBucket, limit.MaxLimit, time.Second) // 1 ns per hit, 1 s of capacity
	chk := []limit.Check{{Name: "r", Key: key, Hits: 1000, Rule: fast}}

	done := make(chan limit.Result, 1)
	go func() {
		res, _ := n.Check(context.Background(), chk)
		done <- res[0]
	}()
	<-called // the batch's forward is hanging; its start time is behind us
	// Meanwhile the key's state moves 1.5 s on (decided here as a stand-in
	// would be): at the batch's start time its bucket would look empty.
	clk.Advance(1500 * time.Millisecond)
	local, _ := n.CheckLocal(transport.WithStandin(context.Background()), chk)
	if !local[0].Allowed {
		t.Fatalf("local decision at the later time = %+v, want admitted", local[0])
	}
	res := <-done
	if res.Error != "" || !res.Allowed {
		t.Fatalf("fail-policy decision after the owner timed out = %+v, want admitted (decided at the time of deciding)", res)
	}
}
