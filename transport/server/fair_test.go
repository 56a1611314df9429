package server

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/shardlimiter/shardlimiter/transport"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/shardlimiter/shardlimiter/internal/poll"
	"github.com/shardlimiter/shardlimiter/limit"
	"github.com/shardlimiter/shardlimiter/transport/pb"
)

func TestFairAdmitsSteps(t *testing.T) {
	t.Parallel()
	const L = 16000 // share with 1 party 8000, with 16: 941; spare L/8 = 2000
	steps := []struct {
		name                    string
		total, own, held, units int64
		parties                 int
		want                    bool
	}{
		{"idle: larger than the bound", 0, 0, 0, 20000, 1, true},
		{"idle but for the call itself", 500, 500, 500, 20000, 1, true},
		{"over the bound", 15500, 0, 0, 1000, 2, false},
		{"within the share, to the last unit", 15999, 0, 0, 1, 17, true},
		{"alone: within the share of L/2", 7000, 0, 7000, 1000, 1, true},
		{"alone: beyond the share, borrowing to 7/8", 13000, 0, 13000, 1000, 1, true},
		{"alone: borrowing stops an eighth short", 14000, 0, 14000, 1000, 1, false},
		{"16 parties: a batch over the share borrows", 13000, 0, 0, 1000, 16, true},
		{"16 parties: the last eighth is not lent", 14000, 0, 0, 1000, 16, false},
		{"16 parties: a small call within its share takes it", 15000, 0, 0, 100, 16, true},
	}
	for _, s := range steps {
		if got := fairAdmits(L, s.total, s.own, s.held, s.units, s.parties); got != s.want {
			t.Errorf("%s: fairAdmits(%d, total %d, own %d, held %d, units %d, parties %d) = %v, want %v",
				s.name, L, s.total, s.own, s.held, s.units, s.parties, got, s.want)
		}
	}
}

// connCtx is the context of a stream on a connection of its own, as grpc
// gives the tap: one peer.Peer per connection.
func connCtx() (context.Context, context.CancelFunc) {
	return context.WithCancel(peer.NewContext(context.Background(), &peer.Peer{}))
}

// reserveBatch charges a call on conn at its headers (or, a small one,
// once decoded) and settles it to size; the ticket, or nil when it was
// refused at either step.
func reserveBatch(t *testing.T, b *InFlight, conn context.Context, size int64) (*ticket, bool) {
	t.Helper()
	ctx, ok := b.reserveConn(conn)
	if !ok {
		return nil, false
	}
	tk, valid := claimTicket(ctx)
	if !valid {
		t.Fatal("claimTicket after reserveConn: the call ended")
	}
	if tk == nil { // a small call: charged once decoded
		tk = b.connTicket(ctx, new(ticket))
	}
	if !tk.settle(size) {
		return nil, false
	}
	return tk, true
}

// TestFairFloodLeavesRoom is the accounting of the flood, step by step: a
// connection sending batches of 1000 without end, then 16 such
// connections, against the default bound of 2 cores; each time a client of
// one check per call on a connection of its own is admitted, and every
// unit comes back.
func TestFairFloodLeavesRoom(t *testing.T) {
	t.Parallel()
	const L = 16000
	for _, conns := range []int{1, 16} {
		t.Run(fmt.Sprintf("%d connections", conns), func(t *testing.T) {
			b := NewFairInFlight(L)
			var held []*ticket
			flooders := make([]context.Context, conns)
			for i := range flooders {
				ctx, cancel := connCtx()
				defer cancel()
				flooders[i] = ctx
				// Its first call teaches the connection its batch size.
				tk, ok := reserveBatch(t, b, ctx, 1000)
				if !ok {
					t.Fatalf("flooder %d: first batch refused with %d in use", i, b.InUse())
				}
				tk.release()
			}
			// Round after round, each flooder asks for another batch.
			for refusedRound := false; !refusedRound; {
				refusedRound = true
				for _, ctx := range flooders {
					if tk, ok := reserveBatch(t, b, ctx, 1000); ok {
						held = append(held, tk)
						refusedRound = false
					}
				}
			}
			if got := b.InUse(); got > L-L/spareDiv {
				t.Errorf("flooders hold %d of %d, want at most %d (an eighth kept free)", got, L, L-L/spareDiv)
			}
			if conns == 1 && b.InUse() < L/2 {
				t.Errorf("one connection alone holds %d of %d, want at least its share %d", b.InUse(), L, L/2)
			}
			// A flooder's next call is refused at its headers: the charge
			// is its estimate, 1000.
			if _, ok := b.reserveConn(flooders[0]); ok {
				t.Errorf("a flooder's call was admitted at its headers with %d in use", b.InUse())
			}
			light, cancel := connCtx()
			defer cancel()
			for i := range 3 {
				tk, ok := reserveBatch(t, b, light, 1)
				if !ok {
					t.Fatalf("light call %d refused with %d of %d in use", i, b.InUse(), L)
				}
				tk.release()
			}
			for _, tk := range held {
				tk.release()
			}
			if got := b.InUse(); got != 0 {
				t.Errorf("InUse() = %d after every call ended, want 0", got)
			}
		})
	}
}

// TestFairSettle: a call charged its connection's estimate at its headers
// gives back what its batch does not use, takes the rest when larger, and
// is refused when the rest does not fit; the estimate follows the batches
// (up at once, down by a quarter).
func TestFairSettle(t *testing.T) {
	t.Parallel()
	const L = 1600 // firstEstimate clamps to L/16 = 100
	b := NewFairInFlight(L)
	conn, cancel := connCtx()
	defer cancel()
	steps := []struct {
		name         string
		size         int64 // settled to; 0: only reserved
		ok           bool
		inUse, estAf int64
	}{
		{"first call: charged the first estimate", 0, true, 100, 100},
		{"settles smaller: gives back; the estimate falls a quarter", 10, true, 10, 75},
		{"settles larger: takes the rest", 500, true, 500, 500},
		{"smaller again: falls a quarter", 20, true, 20, 375},
		{"and again", 20, true, 20, 281},
	}
	for _, s := range steps {
		ctx, ok := b.reserveConn(conn)
		if !ok {
			t.Fatalf("%s: refused at the headers", s.name)
		}
		tk, _ := claimTicket(ctx)
		if s.size > 0 && tk.settle(s.size) != s.ok {
			t.Fatalf("%s: settle(%d) = %v, want %v", s.name, s.size, !s.ok, s.ok)
		}
		if got := b.InUse(); got != s.inUse {
			t.Errorf("%s: InUse() = %d, want %d", s.name, got, s.inUse)
		}
		if tk.h.est != s.estAf {
			t.Errorf("%s: estimate %d, want %d", s.name, tk.h.est, s.estAf)
		}
		tk.release()
	}
	// Another connection holds most of the bound: a call charged 375 at
	// its headers that turns out to be 1500 does not get the rest.
	other, cancel2 := connCtx()
	defer cancel2()
	hog, ok := reserveBatch(t, b, other, 1000)
	if !ok {
		t.Fatal("the other connection's batch was refused on an idle bound")
	}
	ctx, ok := b.reserveConn(conn)
	if !ok {
		t.Fatalf("refused at the headers with %d in use", b.InUse())
	}
	tk, _ := claimTicket(ctx)
	if tk.settle(1500) {
		t.Fatalf("settle(1500) with %d of %d in use admitted", b.InUse(), L)
	}
	if got := b.InUse(); got != 1000 {
		t.Errorf("InUse() = %d after the refused settle, want 1000 (the other call's)", got)
	}
	tk.release()
	hog.release()
	if got := b.InUse(); got != 0 {
		t.Errorf("InUse() = %d at the end, want 0", got)
	}
}

// TestFairUnclaimedTicketExpires: a ticket no handler claims (grpc dropped
// the stream after its tap, or another service's handler ran) is released
// when its call's context ends; claiming it afterwards reports the call
// ended.
func TestFairUnclaimedTicketExpires(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := NewFairInFlight(1600)
		conn, cancel := connCtx()
		ctx, ok := b.reserveConn(conn)
		if !ok || b.InUse() != 100 {
			t.Fatalf("reserveConn = %v with %d in use, want true with 100", ok, b.InUse())
		}
		cancel()
		synctest.Wait()
		if got := b.InUse(); got != 0 {
			t.Fatalf("InUse() = %d after the call's context ended, want 0", got)
		}
		if tk, valid := claimTicket(ctx); tk != nil || valid {
			t.Fatalf("claimTicket after expiry = %v, %v; want nil, false", tk, valid)
		}
	})
}

// TestFairAddrs: HTTP clients share by address; an address's holder is
// forgotten when it holds nothing.
func TestFairAddrs(t *testing.T) {
	t.Parallel()
	b := NewFairInFlight(16)
	flood, light := netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2")
	var held []*ticket
	for {
		tk, ok := b.reserveAddr(flood, 2)
		if !ok {
			break
		}
		held = append(held, tk)
	}
	if got := b.InUse(); got != 14 {
		t.Fatalf("one address took %d of 16, want 14 (its share 8, then borrowing to 7/8)", got)
	}
	tk, ok := b.reserveAddr(light, 1)
	if !ok {
		t.Fatal("another address refused with 14 of 16 in use")
	}
	if b.Holders() != 2 {
		t.Errorf("Holders() = %d, want 2", b.Holders())
	}
	tk.release()
	for _, tk := range held {
		tk.release()
	}
	if b.InUse() != 0 || b.Holders() != 0 {
		t.Errorf("after every call: InUse %d, Holders %d; want 0, 0", b.InUse(), b.Holders())
	}
}

// TestFairConcurrentNeverExceeds: goroutines on many connections reserve,
// settle and release (run with -race): the units held, counted
// independently, never exceed the bound, and all come back.
func TestFairConcurrentNeverExceeds(t *testing.T) {
	t.Parallel()
	const L = 200
	b := NewFairInFlight(L)
	var held, over atomic.Int64
	var wg sync.WaitGroup
	for c := range 8 {
		conn, cancel := connCtx()
		defer cancel()
		for g := range 4 {
			wg.Go(func() {
				for i := range 300 {
					size := int64(1 + (c*7+g*3+i)%60)
					ctx, ok := b.reserveConn(conn)
					if !ok {
						continue
					}
					tk, _ := claimTicket(ctx)
					if tk == nil {
						tk = b.connTicket(ctx, new(ticket))
					}
					if tk.settle(size) {
						if h := held.Add(size); h > L {
							over.Add(1)
						}
						held.Add(-size)
					}
					tk.release()
				}
			})
		}
	}
	wg.Wait()
	if over.Load() > 0 {
		t.Errorf("%d times more than %d units were held", over.Load(), L)
	}
	if got := b.InUse(); got != 0 {
		t.Errorf("InUse() = %d at the end, want 0", got)
	}
}

// floodChecker blocks the batches whose keys start with "flood" until
// release is closed, and answers others at once.
type floodChecker struct {
	entered chan int
	release chan struct{}
}

func (c *floodChecker) Check(ctx context.Context, checks []limit.Check) ([]limit.Result, error) {
	if len(checks) > 0 && strings.HasPrefix(checks[0].Key, "flood") {
		c.entered <- len(checks)
		select {
		case <-c.release:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	out := make([]limit.Result, len(checks))
	for i, ch := range checks {
		out[i] = fakeDecide(ch, "o")
	}
	return out, nil
}

// TestGRPCFairBetweenConnections, over real gRPC connections: a connection
// whose calls hang holds at most 7/8 of a fair bound; its next call is
// refused at its headers (the checker never sees it); a call that has sent
// its headers but not its message holds its charge; a client on another
// connection is answered meanwhile; everything comes back.
func TestGRPCFairBetweenConnections(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	checker := &floodChecker{entered: make(chan int, 64), release: make(chan struct{})}
	bound := NewFairInFlight(640) // share alone 320, borrowing to 560; first estimate 40
	_, target, dialer := startGRPC(t, testConfig{Checker: checker, Metrics: NewMetrics(reg), InFlight: bound})
	flood := dialClient(t, target, dialer)
	light := dialClient(t, target, dialer) // connections of their own
	mid := dialClient(t, target, dialer)

	var calls sync.WaitGroup
	defer calls.Wait()
	defer close(checker.release)
	for i := range 7 {
		calls.Go(func() {
			if _, err := flood.GetRateLimits(ctxTimeout(t), keyedChecks(fmt.Sprintf("flood%d-", i), 80)); err != nil {
				t.Errorf("flood call %d = %v", i, err)
			}
		})
		<-checker.entered // admitted in turn, so that each one's charge is settled
	}
	if got := bound.InUse(); got != 560 {
		t.Fatalf("InUse() = %d with 7 calls of 80 held, want 560", got)
	}
	_, err := flood.GetRateLimits(ctxTimeout(t), keyedChecks("flood-more", 80))
	if status.Code(err) != codes.ResourceExhausted || !errors.Is(err, transport.ErrOverloaded) {
		t.Fatalf("the flooding connection's 8th call = %v, want ResourceExhausted", err)
	}
	if v, _ := sample(t, reg, "shardlimiter_transport_shed_total", "listener", "grpc", "resource", "checks"); v != 1 {
		t.Errorf("shed_total{grpc,checks} = %v, want 1", v)
	}
	select {
	case n := <-checker.entered:
		t.Fatalf("the checker saw a refused call of %d", n)
	default:
	}
	for i := range 3 {
		if res, err := light.GetRateLimits(ctxTimeout(t), keyedChecks(fmt.Sprintf("light%d-", i), 1)); err != nil || len(res) != 1 {
			t.Fatalf("light call %d during the flood = %v, %v", i, res, err)
		}
	}
	// Headers without a message: the call holds its connection's charge
	// (the first estimate, 40) while its message has not arrived.
	ctx, cancel := context.WithCancel(ctxTimeout(t))
	if _, err := mid.Conn().NewStream(ctx, &grpc.StreamDesc{ServerStreams: true, ClientStreams: true}, pb.RateLimiter_GetRateLimits_FullMethodName); err != nil {
		t.Fatalf("NewStream = %v", err)
	}
	poll.Until(t, 10*time.Second, func() bool { return bound.InUse() == 600 }, "InUse() never 600 with a call's headers in")
	cancel()
	poll.Until(t, 10*time.Second, func() bool { return bound.InUse() == 560 }, "InUse() never back to 560 after the headers-only call ended")
}

// TestFairCallsWithoutHolder: on a fair bound, a call without a holder
// (BoundChecker: Envoy's ShouldRateLimit, POST /json) counts as beyond its
// share and leaves an eighth free for the parties under theirs.
func TestFairCallsWithoutHolder(t *testing.T) {
	t.Parallel()
	bound := NewFairInFlight(16)
	c := BoundChecker(&fakeChecker{Owner: "o"}, bound, nil, "")
	ctx := context.Background()
	held, ok := bound.reserveAddr(netip.MustParseAddr("10.0.0.1"), 12)
	if !ok {
		t.Fatal("reserveAddr(12) on an idle bound refused")
	}
	defer held.release()
	if _, err := c.Check(ctx, keyedChecks("fits", 2)); err != nil {
		t.Errorf("Check(2) with 12 of 16 held = %v, want answered (14 leaves 2 free)", err)
	}
	if _, err := c.Check(ctx, keyedChecks("spare", 3)); !errors.Is(err, transport.ErrOverloaded) {
		t.Errorf("Check(3) with 12 of 16 held = %v, want transport.ErrOverloaded (the last eighth is kept)", err)
	}
	if bound.full() {
		t.Errorf("full() with 12 of 16 in use, want false")
	}
	more, _ := bound.reserveAddr(netip.MustParseAddr("10.0.0.2"), 2)
	defer more.release()
	if !bound.full() {
		t.Errorf("full() = false with %d of 16 in use, want true (the tap refuses ShedMethods at 14)", bound.InUse())
	}
}

// BenchmarkFairCall is what a gRPC call of one check pays the fair bound:
// the check at its headers, the charge once decoded and the release, on a
// context with a deadline as grpc gives the tap.
func BenchmarkFairCall(b *testing.B) {
	bound := NewFairInFlight(DefaultInFlightChecks(0))
	conn := peer.NewContext(context.Background(), &peer.Peer{})
	b.ReportAllocs()
	for b.Loop() {
		sctx, cancel := context.WithTimeout(conn, time.Minute)
		ctx, ok := bound.reserveConn(sctx)
		if !ok {
			b.Fatal("refused on an idle bound")
		}
		tk, _ := claimTicket(ctx)
		var own ticket
		if tk == nil { // as a batch of one check is, after its first calls
			tk = bound.connTicket(ctx, &own)
		}
		tk.settle(1)
		tk.release()
		cancel()
	}
}

// BenchmarkStreamContext is the part of BenchmarkFairCall that grpc pays
// anyway: a stream context with a deadline.
func BenchmarkStreamContext(b *testing.B) {
	conn := peer.NewContext(context.Background(), &peer.Peer{})
	b.ReportAllocs()
	for b.Loop() {
		_, cancel := context.WithTimeout(conn, time.Minute)
		cancel()
	}
}

// TestFairSmallCallsChargedWhenDecoded: a connection whose calls are small
// (estimate under headerCharge) is only checked at its headers: no ticket,
// nothing held until the call is decoded and charged (connTicket); and it
// is still refused at its headers when a call of its estimate would not
// fit.
func TestFairSmallCallsChargedWhenDecoded(t *testing.T) {
	t.Parallel()
	b := NewFairInFlight(1600)
	conn, cancel := connCtx()
	defer cancel()
	for range 8 { // teach the connection calls of one check: 100, 75, … 1
		tk, ok := reserveBatch(t, b, conn, 1)
		if !ok {
			t.Fatal("a call of one check refused on an idle bound")
		}
		tk.release()
	}
	ctx, ok := b.reserveConn(conn)
	if tk, _ := claimTicket(ctx); !ok || tk != nil || b.InUse() != 0 {
		t.Fatalf("small call at its headers: ok %v, ticket %v, %d in use; want admitted, no ticket, nothing held", ok, tk, b.InUse())
	}
	var own ticket
	tk := b.connTicket(ctx, &own)
	if !tk.settle(3) || b.InUse() != 3 {
		t.Fatalf("settle(3) of an uncharged call: %d in use, want 3", b.InUse())
	}
	tk.release()
	// Another connection holds all but 0 of what this one may take.
	other, cancel2 := connCtx()
	defer cancel2()
	hog, ok := reserveBatch(t, b, other, 1600)
	if !ok {
		t.Fatal("a batch the size of the bound refused on an idle bound")
	}
	defer hog.release()
	if _, ok := b.reserveConn(conn); ok {
		t.Errorf("small call admitted at its headers with %d of 1600 in use", b.InUse())
	}
}

// TestFairForgetsClosedConnections: a connection's holder is dropped once
// grpc's peer.Peer of it is collected, so that connections that come and
// go do not pile up as parties.
func TestFairForgetsClosedConnections(t *testing.T) {
	t.Parallel()
	b := NewFairInFlight(1600)
	func() {
		for range 10 {
			conn, cancel := connCtx()
			tk, ok := reserveBatch(t, b, conn, 5)
			if !ok {
				t.Fatal("refused on an idle bound")
			}
			tk.release()
			cancel()
		}
	}()
	if got := b.Holders(); got != 10 {
		t.Fatalf("Holders() = %d after calls on 10 connections, want 10", got)
	}
	poll.Until(t, 10*time.Second, func() bool {
		runtime.GC()
		return b.Holders() == 0
	}, "connection holders not forgotten after their peers were collected")
}
