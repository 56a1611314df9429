package peers

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"

	"github.com/shardlimiter/shardlimiter/limit"
	"github.com/shardlimiter/shardlimiter/transport/dial"
)

// leaseState is a StateService that grants leases, recording the call.
type leaseState struct {
	fakeState
	got chan limit.LeaseRequest
}

func (s leaseState) Lease(_ context.Context, r limit.LeaseRequest) (limit.LeaseGrant, error) {
	s.got <- r
	return limit.LeaseGrant{ID: 9, Hits: r.Want / 2, TTL: 500 * time.Millisecond, Deny: time.Second, Credited: r.Leftover}, nil
}

// TestStateLease: State's Lease call carries the request and the grant
// across the wire unchanged, names its caller, refuses what is not leased,
// and is Unimplemented on a node that grants no leases.
func TestStateLease(t *testing.T) {
	t.Parallel()
	st := leaseState{got: make(chan limit.LeaseRequest, 1)}
	_, target, dialer := startGRPC(t, testConfig{State: st})
	c, err := dial.NewStateClient(target, "a", dial.PeerConfig{DialOptions: []grpc.DialOption{dialer}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := limit.Rule{Algorithm: limit.TokenBucket, Limit: 10, Period: time.Minute, Burst: 20}
	want := limit.LeaseRequest{From: "a", Key: "\x01qk", Rule: r, Want: 8, Release: 3, Leftover: 2}
	g, err := c.Lease(ctxTimeout(t), limit.LeaseRequest{Key: want.Key, Rule: r, Want: 8, Release: 3, Leftover: 2})
	if err != nil || g != (limit.LeaseGrant{ID: 9, Hits: 4, TTL: 500 * time.Millisecond, Deny: time.Second, Credited: 2}) {
		t.Fatalf("Lease() = %+v, %v", g, err)
	}
	if got := <-st.got; got != want {
		t.Fatalf("the server got %+v, want %+v", got, want)
	}
	for name, bad := range map[string]limit.Rule{
		"leaky bucket": {Algorithm: limit.LeakyBucket, Limit: 10, Period: time.Minute},
		"invalid rule": {Algorithm: limit.TokenBucket, Limit: 0, Period: time.Minute},
	} {
		if _, err := c.Lease(ctxTimeout(t), limit.LeaseRequest{Key: "k", Rule: bad, Want: 1}); !isCode(err, codes.InvalidArgument) {
			t.Errorf("%s: Lease() = %v, want InvalidArgument", name, err)
		}
	}

	_, target, dialer = startGRPC(t, testConfig{State: fakeState{}})
	c2, err := dial.NewStateClient(target, "a", dial.PeerConfig{DialOptions: []grpc.DialOption{dialer}})
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	if _, err := c2.Lease(ctxTimeout(t), want); !isCode(err, codes.Unimplemented) {
		t.Fatalf("Lease() of a node that grants no leases = %v, want Unimplemented", err)
	}
}
