package dial_test

import (
	"context"
	"fmt"
	"net"
	"time"

	"github.com/shardlimiter/shardlimiter/limit"
	"github.com/shardlimiter/shardlimiter/transport"
	"github.com/shardlimiter/shardlimiter/transport/dial"
	"github.com/shardlimiter/shardlimiter/transport/pb"
	"github.com/shardlimiter/shardlimiter/transport/server"
)

// A node forwards checks to the owner of their key: the owner serves the
// Peers service on its peer listener, and a PeerClient merges the checks
// of concurrent callers into shared RPCs.
func ExampleNewPeerClient() {
	owner := transport.CheckerFunc(func(_ context.Context, checks []limit.Check) ([]limit.Result, error) {
		out := make([]limit.Result, len(checks))
		for i, c := range checks {
			out[i] = limit.Result{Owner: "node-b", Decision: limit.Decision{Allowed: true, Remaining: c.Rule.Limit - c.Hits}}
		}
		return out, nil
	})
	l := server.NewPeerListener(server.Config{})
	l.RegisterChecks(&pb.Peers_ServiceDesc, owner, server.Peers)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Println(err)
		return
	}
	go l.Serve(lis)
	defer l.Stop()

	c, err := dial.NewPeerClient(lis.Addr().String(), dial.PeerConfig{Timeout: 5 * time.Second})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()
	res, err := c.Forward(context.Background(), []limit.Check{{
		Name: "api_per_minute", Key: "account:42", Hits: 1,
		Rule: limit.Rule{Algorithm: limit.TokenBucket, Limit: 100, Period: time.Minute},
	}})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("allowed=%v remaining=%d owner=%s\n", res[0].Allowed, res[0].Remaining, res[0].Owner)
	// Output: allowed=true remaining=99 owner=node-b
}
