package gossip_test

import (
	"context"
	"fmt"
	"time"

	"github.com/shardlimiter/shardlimiter/gossip"
)

// A node with no seeds is a cluster of one. In production BindAddr is the
// --gossip-addr, Seeds the --join list, GRPCAddr the client API and PeerAddr
// the address peers forward checks to; an unspecified host (":8081") is
// read by the peers as this node's gossip IP. Keys (from --gossip-key-file)
// would encrypt gossip.
func Example() {
	m, err := gossip.New(gossip.Config{NodeName: "node-a", BindAddr: "127.0.0.1:0", GRPCAddr: ":8081", PeerAddr: ":8082"})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("before Run:", m.Members(), m.Joined())

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	<-m.Started()
	fmt.Println("running:", m.Members(), m.Joined())

	// A graceful exit: tell the others, then stop gossip.
	if err := m.Leave(time.Second); err != nil {
		fmt.Println(err)
	}
	cancel()
	fmt.Println("Run:", <-done)
	// Output:
	// before Run: [{node-a :8081 :8082}] false
	// running: [{node-a 127.0.0.1:8081 127.0.0.1:8082}] true
	// Run: <nil>
}
