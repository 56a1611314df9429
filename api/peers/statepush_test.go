package peers

import (
	"context"
	"reflect"
	"sync"
	"testing"

	"github.com/shardlimiter/shardlimiter/transport/dial"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/shardlimiter/shardlimiter/limit"
	"github.com/shardlimiter/shardlimiter/transport/pb"
)

// recordingState keeps the pushes it receives.
type recordingState struct {
	mu     sync.Mutex
	pushes []recordedPush
}

type recordedPush struct {
	from  string
	why   limit.Transfer
	parts []int
	keys  []limit.KeyState
}

func (s *recordingState) Push(_ context.Context, from string, why limit.Transfer, parts []int, keys []limit.KeyState) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pushes = append(s.pushes, recordedPush{from, why, parts, keys})
	return nil
}

func (s *recordingState) Pull(context.Context, limit.PullRequest) ([]limit.KeyState, error) {
	return nil, nil
}

func (s *recordingState) last() recordedPush {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pushes[len(s.pushes)-1]
}

// TestStatePush: a push arrives as sent, from our client (encoded by
// package wire) and from the generated one (another node's version); a
// push the server cannot take is refused with InvalidArgument.
func TestStatePush(t *testing.T) {
	t.Parallel()
	rec := &recordingState{}
	_, target, dialer := startGRPC(t, testConfig{State: rec})
	sc, err := dial.NewStateClient(target, "node-a", dial.PeerConfig{DialOptions: []grpc.DialOption{dialer}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sc.Close() })
	keys := []limit.KeyState{
		{Algorithm: limit.TokenBucket, Key: "r\x00account:1", State: []byte{1, 2, 3}},
		{Algorithm: limit.SlidingLog, Key: "r\x00account:2", State: []byte{4}},
		{Algorithm: limit.FixedWindow, Key: "r\x00account:3"},
	}
	if err := sc.Push(ctxTimeout(t), limit.Leave, []int{3, 200}, keys); err != nil {
		t.Fatal(err)
	}
	want := recordedPush{"node-a", limit.Leave, []int{3, 200}, keys}
	if got := rec.last(); !reflect.DeepEqual(got, want) {
		t.Fatalf("received %+v, want %+v", got, want)
	}

	gen := pb.NewStateClient(dialConn(t, target, dialer))
	if _, err := gen.Push(ctxTimeout(t), &pb.PushStateRequest{From: "node-b", Transfer: pb.Transfer_REPLICA,
		Keys: []*pb.KeyState{{Algorithm: pb.Algorithm_LEAKY_BUCKET, Key: []byte("k"), State: []byte{9}}}}); err != nil {
		t.Fatal(err)
	}
	want = recordedPush{"node-b", limit.Replica, []int{}, []limit.KeyState{{Algorithm: limit.LeakyBucket, Key: "k", State: []byte{9}}}}
	if got := rec.last(); !reflect.DeepEqual(got, want) {
		t.Fatalf("received from a generated client %+v, want %+v", got, want)
	}

	for name, m := range map[string]*pb.PushStateRequest{
		"unknown transfer":  {From: "x", Transfer: 7},
		"unknown algorithm": {From: "x", Keys: []*pb.KeyState{{Algorithm: 9, Key: []byte("k")}}},
	} {
		if _, err := gen.Push(ctxTimeout(t), m); status.Code(err) != codes.InvalidArgument {
			t.Errorf("Push of a %s = %v, want InvalidArgument", name, err)
		}
	}
}
