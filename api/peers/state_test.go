package peers

import (
	"errors"
	"slices"
	"testing"

	"github.com/shardlimiter/shardlimiter/transport"
	"github.com/shardlimiter/shardlimiter/transport/dial"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// ringState is a StateService that describes its ring.
type ringState struct {
	fakeState
	info transport.RingInfo
}

func (r ringState) Ring() transport.RingInfo { return r.info }

// TestStateRing: State's Ring call carries the receiver's ring as its
// RingReporter describes it, and is Unimplemented on a node without one.
func TestStateRing(t *testing.T) {
	t.Parallel()
	want := transport.RingInfo{Node: "b", Version: 7, Members: 0xfeedface12345678, Names: []string{"a", "b", "c"}, Ready: true}
	_, target, dialer := startGRPC(t, testConfig{State: ringState{info: want}})
	c, err := dial.NewStateClient(target, "a", dial.PeerConfig{DialOptions: []grpc.DialOption{dialer}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	got, err := c.Ring(ctxTimeout(t))
	if err != nil || got.Node != want.Node || got.Version != want.Version || got.Members != want.Members ||
		!slices.Equal(got.Names, want.Names) || got.Ready != want.Ready || got.Leaving != want.Leaving {
		t.Fatalf("Ring() = %+v, %v; want %+v", got, err, want)
	}

	_, target, dialer = startGRPC(t, testConfig{State: fakeState{}})
	c2, err := dial.NewStateClient(target, "a", dial.PeerConfig{DialOptions: []grpc.DialOption{dialer}})
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	if _, err := c2.Ring(ctxTimeout(t)); !isCode(err, codes.Unimplemented) {
		t.Fatalf("Ring() of a node without RingReporter = %v, want Unimplemented", err)
	}
}

// isCode reports whether err wraps a gRPC status with code.
func isCode(err error, code codes.Code) bool {
	var s interface{ GRPCStatus() *status.Status }
	return errors.As(err, &s) && s.GRPCStatus().Code() == code
}
