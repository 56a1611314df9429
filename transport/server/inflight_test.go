package server

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/shardlimiter/shardlimiter/transport"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	healthgrpc "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/shardlimiter/shardlimiter/limit"
	"github.com/shardlimiter/shardlimiter/transport/pb"
)

func TestInFlightSteps(t *testing.T) {
	t.Parallel()
	b := NewInFlight(10)
	steps := []struct {
		name    string
		acquire int64 // > 0: TryAcquire; < 0: Release
		ok      bool
		inUse   int64
	}{
		{"idle: a batch larger than the bound is admitted", 25, true, 25},
		{"nothing more while it runs", 1, false, 25},
		{"it ends", -25, true, 0},
		{"fits", 4, true, 4},
		{"fits exactly", 6, true, 10},
		{"full", 1, false, 10},
		{"some end", -4, true, 6},
		{"does not fit the rest", 5, false, 6},
		{"fits the rest", 4, true, 10},
		{"not idle: oversize refused", 11, false, 10},
		{"all end", -10, true, 0},
	}
	for _, s := range steps {
		ok := true
		if s.acquire > 0 {
			ok = b.TryAcquire(s.acquire)
		} else {
			b.Release(-s.acquire)
		}
		if ok != s.ok || b.InUse() != s.inUse {
			t.Fatalf("%s: TryAcquire/Release(%d) = %v with %d in use, want %v with %d", s.name, s.acquire, ok, b.InUse(), s.ok, s.inUse)
		}
	}
	if b.Limit() != 10 {
		t.Errorf("Limit() = %d, want 10", b.Limit())
	}
}

func TestInFlightNilAdmitsEverything(t *testing.T) {
	t.Parallel()
	var b *InFlight
	if NewInFlight(0) != nil || NewInFlight(-1) != nil {
		t.Fatal("NewInFlight(<= 0) is not nil")
	}
	if !b.TryAcquire(1 << 40) {
		t.Fatal("nil bound refused")
	}
	b.Release(1 << 40)
	if b.InUse() != 0 || b.Limit() != 0 {
		t.Fatalf("nil bound: InUse %d Limit %d, want 0 0", b.InUse(), b.Limit())
	}
}

// TestInFlightConcurrentNeverExceeds runs many goroutines acquiring and
// releasing weighted units (run with -race): the units held, counted
// independently, never exceed the bound, except one oversize acquisition
// alone; and all units are back at the end.
func TestInFlightConcurrentNeverExceeds(t *testing.T) {
	t.Parallel()
	const bound = 100
	b := NewInFlight(bound)
	var held, over atomic.Int64
	var admitted, refused atomic.Int64
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 2000 {
				units := int64(1 + (g*7+i)%40)
				if i%500 == 0 {
					units = 3 * bound // oversize: only alone
				}
				if !b.TryAcquire(units) {
					refused.Add(1)
					continue
				}
				admitted.Add(1)
				if h := held.Add(units); h > bound && h != units {
					over.Add(1)
				}
				held.Add(-units)
				b.Release(units)
			}
		})
	}
	wg.Wait()
	if over.Load() != 0 {
		t.Errorf("%d times more than %d units were held by more than one caller", over.Load(), bound)
	}
	if b.InUse() != 0 {
		t.Errorf("InUse() = %d after every release, want 0", b.InUse())
	}
	if admitted.Load() == 0 {
		t.Errorf("nothing admitted (%d refused)", refused.Load())
	}
}

// blockingChecker decides like fakeChecker once release is closed, and
// reports each call on entered.
type blockingChecker struct {
	entered chan int
	release chan struct{}
}

func newBlockingChecker() *blockingChecker {
	return &blockingChecker{entered: make(chan int, 16), release: make(chan struct{})}
}

func (c *blockingChecker) Check(ctx context.Context, checks []limit.Check) ([]limit.Result, error) {
	c.entered <- len(checks)
	select {
	case <-c.release:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	out := make([]limit.Result, len(checks))
	for i, ch := range checks {
		out[i] = fakeDecide(ch, "blocking")
	}
	return out, nil
}

func keyedChecks(prefix string, n int) []limit.Check {
	out := make([]limit.Check, n)
	for i := range out {
		out[i] = mkCheck(fmt.Sprintf("%s%d", prefix, i), 1)
	}
	return out
}

// TestGRPCShedsAtOnce: with 8 of 10 units held by a call in progress, a
// call of 5 checks is refused at once with ResourceExhausted and a retry
// delay, and counted; the Peers service of another server with a bound of
// its own is not affected; once the first call ends, the same call is
// answered.
func TestGRPCShedsAtOnce(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	blocking := newBlockingChecker()
	clientBound, peerBound := NewInFlight(10), NewInFlight(10)
	_, target, dialer := startGRPC(t, testConfig{Checker: blocking, Metrics: m, InFlight: clientBound})
	_, peerTarget, peerDialer := startGRPC(t, testConfig{Local: &fakeChecker{Owner: "owner"}, Metrics: m, InFlight: peerBound})
	client := dialClient(t, target, dialer)

	first := make(chan error, 1)
	go func() {
		_, err := client.GetRateLimits(ctxTimeout(t), keyedChecks("held", 8))
		first <- err
	}()
	<-blocking.entered
	if got := clientBound.InUse(); got != 8 {
		t.Fatalf("InUse() = %d with a call of 8 in progress, want 8", got)
	}
	_, err := client.GetRateLimits(ctxTimeout(t), keyedChecks("shed", 5))
	if status.Code(err) != codes.ResourceExhausted || !errors.Is(err, transport.ErrOverloaded) {
		t.Fatalf("GetRateLimits(5) with 8 of 10 held = %v, want ResourceExhausted wrapping transport.ErrOverloaded", err)
	}
	if d, ok := transport.RetryDelay(err); !ok || d != transport.ShedRetryDelay {
		t.Errorf("transport.RetryDelay(%v) = %v, %v; want %v, true", err, d, ok, transport.ShedRetryDelay)
	}
	if v, _ := sample(t, reg, "shardlimiter_transport_shed_total", "listener", "grpc", "resource", "checks"); v != 1 {
		t.Errorf("shed_total{grpc,checks} = %v, want 1", v)
	}
	// A call that fits the rest is answered meanwhile (it would block in
	// the checker, so ask the peer server, whose bound is its own).
	peers := pb.NewPeersClient(dialConn(t, peerTarget, peerDialer))
	if _, err := peers.ForwardRateLimits(ctxTimeout(t), &pb.ForwardRateLimitsRequest{
		Requests: []*pb.RateLimitRequest{wireReq("a", 1, nil)}}); err != nil {
		t.Errorf("ForwardRateLimits on the peer server while the client bound is full = %v", err)
	}
	close(blocking.release)
	if err := <-first; err != nil {
		t.Fatalf("the call in progress = %v", err)
	}
	if _, err := client.GetRateLimits(ctxTimeout(t), keyedChecks("after", 5)); err != nil {
		t.Fatalf("GetRateLimits(5) after the first call ended = %v", err)
	}
	if got := clientBound.InUse(); got != 0 {
		t.Errorf("InUse() = %d after every call, want 0", got)
	}
}

// TestGRPCOversizeBatchOnIdleNode: a batch larger than the whole bound is
// answered when nothing else is in flight.
func TestGRPCOversizeBatchOnIdleNode(t *testing.T) {
	t.Parallel()
	_, target, dialer := startGRPC(t, testConfig{Checker: &fakeChecker{Owner: "o"}, InFlight: NewInFlight(10)})
	res, err := dialClient(t, target, dialer).GetRateLimits(ctxTimeout(t), keyedChecks("k", 50))
	if err != nil || len(res) != 50 {
		t.Fatalf("GetRateLimits(50) with a bound of 10 on an idle server = %d results, %v", len(res), err)
	}
}

// BenchmarkInFlight is the admission cost of one call: a TryAcquire and a
// Release of a batch of 100, from every core at once on one bound.
func BenchmarkInFlight(b *testing.B) {
	bound := NewInFlight(DefaultInFlightChecks(0))
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if bound.TryAcquire(100) {
				bound.Release(100)
			}
		}
	})
}

// TestGRPCShedsAtTheHeadersWhenFull: while the bound is full, a call is
// refused before its message is read, with the same status and count; a
// health check is not refused.
func TestGRPCShedsAtTheHeadersWhenFull(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	bound := NewInFlight(10)
	_, target, dialer := startGRPC(t, testConfig{Checker: &fakeChecker{Owner: "o"}, Metrics: NewMetrics(reg), InFlight: bound})
	client := dialClient(t, target, dialer)
	if !bound.TryAcquire(10) {
		t.Fatal("TryAcquire(10) on an idle bound failed")
	}
	_, err := client.GetRateLimits(ctxTimeout(t), keyedChecks("k", 1))
	if d, ok := transport.RetryDelay(err); !errors.Is(err, transport.ErrOverloaded) || !ok || d != transport.ShedRetryDelay {
		t.Fatalf("GetRateLimits with the bound full = %v (retry delay %v, %v), want transport.ErrOverloaded with %v", err, d, ok, transport.ShedRetryDelay)
	}
	if v, _ := sample(t, reg, "shardlimiter_transport_shed_total", "listener", "grpc", "resource", "checks"); v != 1 {
		t.Errorf("shed_total{grpc,checks} = %v, want 1", v)
	}
	if _, err := healthgrpc.NewHealthClient(dialConn(t, target, dialer)).Check(ctxTimeout(t), &healthgrpc.HealthCheckRequest{}); err != nil {
		t.Errorf("health check with the bound full = %v", err)
	}
	bound.Release(10)
	if _, err := client.GetRateLimits(ctxTimeout(t), keyedChecks("k", 1)); err != nil {
		t.Fatalf("GetRateLimits with the bound free = %v", err)
	}
}
