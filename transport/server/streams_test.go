package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/shardlimiter/shardlimiter/limit"
	"github.com/shardlimiter/shardlimiter/transport"
	"github.com/shardlimiter/shardlimiter/transport/pb"
)

// TestStreamGracefulStop: a stream busy with a batch answers it; an idle
// stream does not hold GracefulStop; nothing sent afterwards is decided.
func TestStreamGracefulStop(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var decided []string
	entered, release := make(chan string, 4), make(chan struct{})
	local := transport.CheckerFunc(func(_ context.Context, checks []limit.Check) ([]limit.Result, error) {
		mu.Lock()
		decided = append(decided, checks[0].Key)
		mu.Unlock()
		if checks[0].Key == "held" {
			entered <- checks[0].Key
			<-release
		}
		results := make([]limit.Result, len(checks))
		for i, c := range checks {
			results[i] = fakeDecide(c, "owner")
		}
		return results, nil
	})
	srv, target, dialer := startGRPC(t, testConfig{Local: local})
	conn := dialConn(t, target, dialer)
	ctx := ctxTimeout(t)

	// An idle stream: one batch answered, then nothing.
	idle, err := pb.NewPeersClient(conn).StreamForwardRateLimits(ctx)
	if err != nil {
		t.Fatal(err)
	}
	send := func(s pb.Peers_StreamForwardRateLimitsClient, key string) error {
		return s.Send(&pb.ForwardRateLimitsRequest{Requests: []*pb.RateLimitRequest{wireReq(key, 1, nil)}})
	}
	if err := send(idle, "first"); err != nil {
		t.Fatal(err)
	}
	if resp, err := idle.Recv(); err != nil || len(resp.Responses) != 1 {
		t.Fatalf("first answer = %v, %v", resp, err)
	}
	// A busy stream: its batch is held in the checker.
	busy, err := pb.NewPeersClient(conn).StreamForwardRateLimits(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := send(busy, "held"); err != nil {
		t.Fatal(err)
	}
	<-entered

	stopped := make(chan struct{})
	go func() { srv.GracefulStop(); close(stopped) }()
	// The idle stream ends, canceled by the server, without an answer.
	if resp, err := idle.Recv(); status.Code(err) != codes.Canceled {
		t.Errorf("idle stream after GracefulStop: Recv = %v, %v, want Canceled", resp, err)
	}
	select {
	case <-stopped:
		t.Fatal("GracefulStop returned while a batch was being decided")
	default:
	}
	close(release)
	resp, err := busy.Recv()
	if err != nil || len(resp.Responses) != 1 || resp.Owner != "owner" {
		t.Fatalf("held batch during GracefulStop = %v, %v, want its answer", resp, err)
	}
	// The batch after it is not read, or read and not decided; the stream
	// ends with OK.
	_ = send(busy, "late")
	if resp, err := busy.Recv(); !errors.Is(err, io.EOF) {
		t.Errorf("after the held batch: Recv = %v, %v, want io.EOF", resp, err)
	}
	select {
	case <-stopped:
	case <-time.After(10 * time.Second):
		t.Fatal("GracefulStop did not return once the streams were answered")
	}
	mu.Lock()
	defer mu.Unlock()
	if fmt.Sprint(decided) != "[first held]" {
		t.Errorf("decided %v, want [first held]", decided)
	}
}

func TestStreamErrorStatus(t *testing.T) {
	t.Parallel()
	_, target, dialer := startGRPC(t, testConfig{Local: &fakeChecker{}, MaxBatch: 2})
	conn := dialConn(t, target, dialer)
	s, err := pb.NewPeersClient(conn).StreamForwardRateLimits(ctxTimeout(t))
	if err != nil {
		t.Fatal(err)
	}
	reqs := []*pb.RateLimitRequest{wireReq("a", 1, nil), wireReq("b", 1, nil), wireReq("c", 1, nil)}
	if err := s.Send(&pb.ForwardRateLimitsRequest{Requests: reqs}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Recv(); status.Code(err) != codes.InvalidArgument {
		t.Errorf("a batch over MaxBatch on a stream: Recv = %v, want InvalidArgument", err)
	}
}
