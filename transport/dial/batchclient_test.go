package dial

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shardlimiter/shardlimiter/ring"
	"github.com/shardlimiter/shardlimiter/transport"

	"google.golang.org/grpc"

	"github.com/shardlimiter/shardlimiter/internal/poll"
	"github.com/shardlimiter/shardlimiter/limit"
)

func TestBatchClientSendsToRateLimiter(t *testing.T) {
	t.Parallel()
	fc := &fakeChecker{Owner: "n1"}
	_, target, dialer := startGRPC(t, testConfig{Checker: fc})
	c, err := NewBatchClient(target, PeerConfig{DialOptions: []grpc.DialOption{dialer}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Go(func() {
			key := fmt.Sprintf("k%d", i)
			res, err := c.GetRateLimits(ctxTimeout(t), []limit.Check{mkCheck(key, 1)})
			if err != nil || len(res) != 1 || !res[0].Allowed || res[0].Owner != "n1" {
				t.Errorf("GetRateLimits(%s) = %+v, %v; want allowed by n1", key, res, err)
			}
		})
	}
	wg.Wait()
	n := 0
	for _, b := range fc.Got() {
		n += len(b)
	}
	if n != 20 {
		t.Errorf("the RateLimiter service decided %d checks, want 20", n)
	}
	if err := c.Close(); err != nil {
		t.Errorf("Close = %v", err)
	}
	if _, err := c.GetRateLimits(ctxTimeout(t), []limit.Check{mkCheck("k", 1)}); !errors.Is(err, transport.ErrClosed) {
		t.Errorf("GetRateLimits after Close = %v, want transport.ErrClosed", err)
	}
}

// fakeMembers is a MembershipSource whose ring a test changes.
type fakeMembers struct {
	version atomic.Uint64
	mu      sync.Mutex
	members []ring.Member
}

func (f *fakeMembers) set(members ...ring.Member) {
	f.mu.Lock()
	f.members = members
	f.mu.Unlock()
	f.version.Add(1)
}

func (f *fakeMembers) RingVersion() uint64 { return f.version.Load() }

func (f *fakeMembers) Membership() ring.Membership {
	f.mu.Lock()
	defer f.mu.Unlock()
	return ring.Membership{Node: "a", Version: f.version.Load(), Members: f.members,
		Config: ring.Config{PartitionCount: 7, ReplicationFactor: 3, Load: 1.25}}
}

func TestWatchMembers(t *testing.T) {
	t.Parallel()
	src := &fakeMembers{}
	src.set(ring.Member{Name: "a", Addr: "127.0.0.1:1"})
	srv, target, dialer := startGRPC(t, testConfig{Checker: &fakeChecker{}, Members: src})
	c, err := NewBatchClient(target, PeerConfig{DialOptions: []grpc.DialOption{dialer}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	var mu sync.Mutex
	var got []ring.Membership
	last := func() (ring.Membership, int) {
		mu.Lock()
		defer mu.Unlock()
		if len(got) == 0 {
			return ring.Membership{}, 0
		}
		return got[len(got)-1], len(got)
	}
	done := make(chan error, 1)
	go func() {
		done <- c.WatchMembers(ctxTimeout(t), func(m ring.Membership) {
			mu.Lock()
			got = append(got, m)
			mu.Unlock()
		})
	}()
	poll.Until(t, 5*time.Second, func() bool { _, n := last(); return n == 1 }, "first ring")
	if m, _ := last(); m.Version != 1 || len(m.Members) != 1 || m.Config.PartitionCount != 7 || m.Config.Load != 1.25 || m.Node != "a" {
		t.Errorf("first update = %+v", m)
	}
	src.set(ring.Member{Name: "a", Addr: "127.0.0.1:1"}, ring.Member{Name: "b", Addr: "127.0.0.1:2"})
	poll.Until(t, 5*time.Second, func() bool { _, n := last(); return n == 2 }, "second ring")
	if m, _ := last(); m.Version != 2 || len(m.Members) != 2 || m.Members[1] != (ring.Member{Name: "b", Addr: "127.0.0.1:2"}) {
		t.Errorf("second update = %+v", m)
	}
	srv.GracefulStop() // ends the stream: GracefulStop must not wait for it
	if err := <-done; !errors.Is(err, transport.ErrUnavailable) {
		t.Errorf("WatchMembers after GracefulStop = %v, want transport.ErrUnavailable", err)
	}
}

func TestWatchMembersNotServed(t *testing.T) {
	t.Parallel()
	_, target, dialer := startGRPC(t, testConfig{Checker: &fakeChecker{}})
	c, err := NewBatchClient(target, PeerConfig{DialOptions: []grpc.DialOption{dialer}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.WatchMembers(ctxTimeout(t), func(ring.Membership) {}); !errors.Is(err, ErrNoCluster) {
		t.Errorf("WatchMembers = %v, want ErrNoCluster", err)
	}
}

func TestWatchMembersClose(t *testing.T) {
	t.Parallel()
	src := &fakeMembers{}
	src.set(ring.Member{Name: "a", Addr: "127.0.0.1:1"})
	_, target, dialer := startGRPC(t, testConfig{Checker: &fakeChecker{}, Members: src})
	c, err := NewBatchClient(target, PeerConfig{DialOptions: []grpc.DialOption{dialer}})
	if err != nil {
		t.Fatal(err)
	}
	first := make(chan struct{}, 1)
	done := make(chan error, 1)
	go func() {
		done <- c.WatchMembers(ctxTimeout(t), func(ring.Membership) {
			select {
			case first <- struct{}{}:
			default:
			}
		})
	}()
	<-first
	c.Close()
	if err := <-done; !errors.Is(err, transport.ErrClosed) {
		t.Errorf("WatchMembers after Close = %v, want transport.ErrClosed", err)
	}
}
