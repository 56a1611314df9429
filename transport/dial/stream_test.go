package dial

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/shardlimiter/shardlimiter/transport"
	"github.com/shardlimiter/shardlimiter/transport/server"
	"github.com/shardlimiter/shardlimiter/transport/transporttest"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/connectivity"

	"github.com/shardlimiter/shardlimiter/internal/poll"
	"github.com/shardlimiter/shardlimiter/limit"
	"github.com/shardlimiter/shardlimiter/transport/pb"
)

// rpcCounter counts the unary calls and the streams a server was asked
// for, by method.
type rpcCounter struct {
	mu    sync.Mutex
	calls map[string]int
}

func (r *rpcCounter) add(method string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.calls == nil {
		r.calls = map[string]int{}
	}
	r.calls[method]++
}

func (r *rpcCounter) count(method string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.calls[method]
}

func (r *rpcCounter) options() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			r.add(info.FullMethod)
			return h(ctx, req)
		}),
		grpc.ChainStreamInterceptor(func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
			r.add(info.FullMethod)
			return h(srv, ss)
		}),
	}
}

func TestPeerClientReusesItsStreams(t *testing.T) {
	t.Parallel()
	for _, api := range []bool{false, true} {
		t.Run(fmt.Sprint("api=", api), func(t *testing.T) {
			t.Parallel()
			var rpcs rpcCounter
			checker := &fakeChecker{Owner: "owner"}
			_, target, dialer := startGRPC(t, testConfig{Checker: checker, Local: checker, ServerOptions: rpcs.options()})
			var fwd func(context.Context, []limit.Check) ([]limit.Result, error)
			streamMethod, unaryMethod := transport.StreamForwardMethod, pb.Peers_ForwardRateLimits_FullMethodName
			if api {
				bc, err := NewBatchClient(target, PeerConfig{MaxInFlight: 2, DialOptions: []grpc.DialOption{dialer}})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = bc.Close() })
				fwd = bc.GetRateLimits
				streamMethod, unaryMethod = transport.StreamRateLimitsMethod, pb.RateLimiter_GetRateLimits_FullMethodName
			} else {
				pc, err := NewPeerClient(target, PeerConfig{MaxInFlight: 2, DialOptions: []grpc.DialOption{dialer}})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = pc.Close() })
				fwd = pc.Forward
			}
			ctx := ctxTimeout(t)
			for i := range 20 {
				checks := []limit.Check{mkCheck(fmt.Sprint("k", i), 3), mkCheck("over", 11)}
				results, err := fwd(ctx, checks)
				if err != nil || len(results) != 2 {
					t.Fatalf("call %d = %v, %v", i, results, err)
				}
				for j, c := range checks {
					if want := fakeDecide(c, "owner"); !sameAnswer(results[j], want) {
						t.Fatalf("call %d item %d = %+v, want %+v", i, j, results[j], want)
					}
				}
			}
			if n := rpcs.count(streamMethod); n != 1 {
				t.Errorf("streams opened for 20 sequential calls = %d, want 1", n)
			}
			if n := rpcs.count(unaryMethod); n != 0 {
				t.Errorf("unary calls = %d, want 0", n)
			}
			if n := len(checker.Got()); n != 20 {
				t.Errorf("batches decided = %d, want 20", n)
			}
		})
	}
}

// sameAnswer compares two results but for ResetAt, which the wire rounds
// to the millisecond.
func sameAnswer(a, b limit.Result) bool {
	a.ResetAt, b.ResetAt = 0, 0
	return a == b
}

// startUnaryOnly serves Peers with its unary method only, as a node of a
// version without the stream method, over bufconn.
func startUnaryOnly(t testing.TB, local transport.Checker) (string, grpc.DialOption) {
	t.Helper()
	l := server.NewPeerListener(server.Config{})
	desc := pb.Peers_ServiceDesc
	desc.Streams = nil
	l.RegisterChecks(&desc, local, server.Peers)
	return transporttest.Bufconn(t, l)
}

func TestPeerClientFallsBackToUnary(t *testing.T) {
	t.Parallel()
	checker := &fakeChecker{Owner: "old"}
	target, dialer := startUnaryOnly(t, checker)
	c, err := NewPeerClient(target, PeerConfig{DialOptions: []grpc.DialOption{dialer}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	ctx := ctxTimeout(t)
	for i := range 3 {
		check := mkCheck(fmt.Sprint("k", i), 2)
		results, err := c.Forward(ctx, []limit.Check{check})
		if err != nil || len(results) != 1 || !sameAnswer(results[0], fakeDecide(check, "old")) {
			t.Fatalf("Forward %d to a node without the stream method = %+v, %v", i, results, err)
		}
	}
	if !c.streams.unaryOnly.Load() {
		t.Error("the client still tries streams after Unimplemented")
	}
	if n := len(checker.Got()); n != 3 {
		t.Errorf("batches decided = %d, want 3 (each exactly once)", n)
	}
}

// streamingClient returns a PeerClient of one slot whose stream is open and
// idle: it has answered one batch.
func streamingClient(t testing.TB, target string, dialer grpc.DialOption) *PeerClient {
	t.Helper()
	c, err := NewPeerClient(target, PeerConfig{MaxInFlight: 1, DialOptions: []grpc.DialOption{dialer}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	if _, err := c.Forward(ctxTimeout(t), []limit.Check{mkCheck("a", 1)}); err != nil {
		t.Fatal(err)
	}
	return c
}

// TestPeerClientAcrossAStop: a PeerClient whose stream the node ends while
// stopping sends the next batch as a unary call, which a stopped node
// refuses: the batch fails as Unavailable, decided nowhere.
func TestPeerClientAcrossAStop(t *testing.T) {
	t.Parallel()
	checker := &fakeChecker{Owner: "owner"}
	srv, target, dialer := startGRPC(t, testConfig{Local: checker})
	c := streamingClient(t, target, dialer)
	ctx := ctxTimeout(t)
	srv.GracefulStop()
	res, err := c.Forward(ctx, []limit.Check{mkCheck("b", 1)})
	if !errors.Is(err, transport.ErrUnavailable) || len(res) != 1 || res[0].Reason != limit.Unavailable {
		t.Errorf("Forward after the node stopped = %+v, %v, want transport.ErrUnavailable", res, err)
	}
	if n := len(checker.Got()); n != 1 {
		t.Errorf("batches decided = %d, want 1", n)
	}
}

// TestPeerClientAfterNodeRestart: a stream whose connection died while it
// was idle does not fail the next batch: the batch was never sent, and
// goes to the restarted node.
func TestPeerClientAfterNodeRestart(t *testing.T) {
	t.Parallel()
	serve := func(addr string, checker transport.Checker) *server.Listener {
		t.Helper()
		lis, err := net.Listen("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		srv := server.NewPeerListener(server.Config{})
		srv.RegisterChecks(&pb.Peers_ServiceDesc, checker, server.Peers)
		go func() { _ = srv.Serve(lis) }()
		t.Cleanup(srv.Stop)
		return srv
	}
	first, second := &fakeChecker{Owner: "first"}, &fakeChecker{Owner: "second"}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	_ = lis.Close()
	srv := serve(addr, first)
	c, err := NewPeerClient(addr, PeerConfig{MaxInFlight: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	ctx := ctxTimeout(t)
	if res, err := c.Forward(ctx, []limit.Check{mkCheck("a", 1)}); err != nil || res[0].Owner != "first" {
		t.Fatalf("Forward = %+v, %v", res, err)
	}
	srv.Stop() // the client's stream is idle: its connection dies under it
	poll.Until(t, 10*time.Second, func() bool { return c.conn.GetState() != connectivity.Ready }, "%s", "the client saw its connection end")
	serve(addr, second)
	res, err := c.Forward(ctx, []limit.Check{mkCheck("b", 1)})
	if err != nil || res[0].Owner != "second" {
		t.Fatalf("Forward after the node restarted = %+v, %v, want an answer from the new node", res, err)
	}
	if n := len(first.Got()); n != 1 {
		t.Errorf("the stopped node decided %d batches, want 1", n)
	}
}

// TestStreamShed: a batch over the in-flight bound ends its stream with
// ResourceExhausted and a retry delay, as the unary call is refused; the
// next batch opens another stream and is served.
func TestStreamShed(t *testing.T) {
	t.Parallel()
	bound := server.NewInFlight(4)
	checker := &fakeChecker{Owner: "owner"}
	_, target, dialer := startGRPC(t, testConfig{Local: checker, InFlight: bound})
	c := streamingClient(t, target, dialer)
	ctx := ctxTimeout(t)
	if !bound.TryAcquire(2) { // the stream is open: its next batch of 3 does not fit
		t.Fatal("TryAcquire(2) on an idle bound of 4 failed")
	}
	checks := []limit.Check{mkCheck("b", 1), mkCheck("c", 1), mkCheck("d", 1)}
	if _, err := c.Forward(ctx, checks); !errors.Is(err, transport.ErrOverloaded) {
		t.Errorf("Forward over the bound = %v, want transport.ErrOverloaded", err)
	}
	bound.Release(2)
	poll.Until(t, 10*time.Second, func() bool {
		res, err := c.Forward(ctx, checks)
		return err == nil && len(res) == 3
	}, "%s", "served again once the bound has room")
	if n := len(checker.Got()); n != 2 {
		t.Errorf("batches decided = %d, want 2", n)
	}
}

// TestPeerClientRedialsAfterAnOutage: a peer unreachable when the client
// dialed leaves the connection in TransientFailure with a reconnect
// backoff (here a minute); once the peer listens, a forward dials again at
// once, so forwards are answered again within a retry or two, not after
// the backoff (a partition's heal: peer/suspension.go's probes).
func TestPeerClientRedialsAfterAnOutage(t *testing.T) {
	t.Parallel()
	addr := closedAddr(t)
	c, err := NewPeerClient(addr, PeerConfig{MaxInFlight: 1, Timeout: 500 * time.Millisecond, DialOptions: []grpc.DialOption{
		grpc.WithConnectParams(grpc.ConnectParams{Backoff: backoff.Config{BaseDelay: time.Minute, Multiplier: 1, MaxDelay: time.Minute}, MinConnectTimeout: time.Second}),
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	ctx := ctxTimeout(t)
	if _, err := c.Forward(ctx, []limit.Check{mkCheck("a", 1)}); err == nil {
		t.Fatal("Forward to an address nothing listens on succeeded")
	}
	poll.Until(t, 10*time.Second, func() bool { return c.conn.GetState() == connectivity.TransientFailure }, "%s", "the dial failed")

	lis, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	srv := server.NewPeerListener(server.Config{})
	srv.RegisterChecks(&pb.Peers_ServiceDesc, &fakeChecker{Owner: "back"}, server.Peers)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	poll.Until(t, 5*time.Second, func() bool {
		res, err := c.Forward(ctx, []limit.Check{mkCheck("b", 1)})
		return err == nil && res[0].Owner == "back"
	}, "%s", "a forward answered by the peer now listening, before the minute's backoff")
}
