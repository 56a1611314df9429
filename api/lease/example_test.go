package lease_test

import (
	"context"
	"fmt"

	"github.com/shardlimiter/shardlimiter/api/lease"
	"github.com/shardlimiter/shardlimiter/limit"
	"github.com/shardlimiter/shardlimiter/transport/server"
)

// owner stands for the node (peer.Node.Lease).
type owner struct{}

func (owner) Lease(context.Context, limit.LeaseRequest) (limit.LeaseGrant, error) {
	return limit.LeaseGrant{}, nil
}

// A node lets the clients that present a certificate its client listener
// verified hold leases.
func Example() {
	l := server.NewClientListener(server.Config{})
	defer l.Stop()
	svc := lease.Register(l, owner{}, lease.Config{Access: lease.Certified})
	fmt.Printf("%+v\n", svc.Counts())
	// Output: {Granted:0 Denied:0 Empty:0 NotOwner:0 Refused:0 Invalid:0 Failed:0}
}
