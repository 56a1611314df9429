package peers

import (
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/shardlimiter/shardlimiter/transport/pb"
	"github.com/shardlimiter/shardlimiter/transport/server"
)

// TestStateShedsOnThePeerBound: State calls share the bound of their
// listener's Peers service.
func TestStateShedsOnThePeerBound(t *testing.T) {
	t.Parallel()
	bound := server.NewInFlight(10)
	_, target, dialer := startGRPC(t, testConfig{State: &fakeState{}, InFlight: bound})
	if !bound.TryAcquire(10) {
		t.Fatal("TryAcquire(10) on an idle bound failed")
	}
	state := pb.NewStateClient(dialConn(t, target, dialer))
	_, err := state.Pull(ctxTimeout(t), &pb.PullStateRequest{From: "x"})
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("Pull with the bound full = %v, want ResourceExhausted", err)
	}
	bound.Release(10)
	if _, err := state.Pull(ctxTimeout(t), &pb.PullStateRequest{From: "x"}); err != nil {
		t.Fatalf("Pull with the bound free = %v", err)
	}
}
