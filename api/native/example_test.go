package native_test

import (
	"context"
	"fmt"
	"net"
	"time"

	"github.com/shardlimiter/shardlimiter/api/native"
	"github.com/shardlimiter/shardlimiter/limit"
	"github.com/shardlimiter/shardlimiter/transport"
	"github.com/shardlimiter/shardlimiter/transport/dial"
	"github.com/shardlimiter/shardlimiter/transport/server"
)

// A node registers the native API, answered by its Checker, on its client
// listener; a client asks about one key.
func Example() {
	// The node: here a Checker that admits up to the limit in one call.
	node := transport.CheckerFunc(func(_ context.Context, checks []limit.Check) ([]limit.Result, error) {
		results := make([]limit.Result, len(checks))
		for i, c := range checks {
			allowed := c.Hits <= c.Rule.Limit
			results[i] = limit.Result{Owner: "node-a", Decision: limit.Decision{Allowed: allowed}}
			if allowed {
				results[i].Remaining = c.Rule.Limit - c.Hits
			}
		}
		return results, nil
	})
	srv := server.NewClientListener(server.Config{})
	native.Register(srv, node, nil)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Println(err)
		return
	}
	go srv.Serve(lis)
	defer srv.GracefulStop()
	srv.SetServing(true)

	client, err := dial.Dial(lis.Addr().String())
	if err != nil {
		fmt.Println(err)
		return
	}
	defer client.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	results, err := client.GetRateLimits(ctx, []limit.Check{{
		Name: "api_per_minute", Key: "account:42", Hits: 1,
		Rule: limit.Rule{Algorithm: limit.TokenBucket, Limit: 100, Period: time.Minute},
	}})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("allowed=%v remaining=%d owner=%s\n", results[0].Allowed, results[0].Remaining, results[0].Owner)
	// Output: allowed=true remaining=99 owner=node-a
}
