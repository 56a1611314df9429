package client_test

import (
	"context"
	"fmt"
	"log"
	"net"
	"time"

	"github.com/shardlimiter/shardlimiter/api/native"
	"github.com/shardlimiter/shardlimiter/transport/server"

	"github.com/shardlimiter/shardlimiter/client"
	"github.com/shardlimiter/shardlimiter/limit"
	"github.com/shardlimiter/shardlimiter/transport"
)

// A node for the example: a gRPC server whose checker admits 2 hits per
// key. An application would give Targets the address of its cluster, e.g.
// "shardlimiter.shardlimiter.svc:8081".
func startNode() (addr string, stop func()) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	used := map[string]int64{}
	srv := server.NewClientListener(server.Config{})
	native.Register(srv, transport.CheckerFunc(
		func(_ context.Context, checks []limit.Check) ([]limit.Result, error) {
			out := make([]limit.Result, len(checks))
			for i, c := range checks {
				if used[c.Key]+c.Hits <= c.Rule.Limit {
					used[c.Key] += c.Hits
					out[i].Allowed = true
				} else {
					out[i].RetryAfter = 30 * time.Second
				}
				out[i].Remaining = c.Rule.Limit - used[c.Key]
			}
			return out, nil
		}), nil)
	done := make(chan struct{})
	go func() { defer close(done); srv.Serve(lis) }()
	return lis.Addr().String(), func() { srv.Stop(); <-done }
}

func Example() {
	addr, stop := startNode()
	defer stop()

	ctx := context.Background()
	c, err := client.New(ctx, client.Config{Targets: []string{addr}})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	rule := limit.Rule{Algorithm: limit.TokenBucket, Limit: 2, Period: time.Minute}
	for range 3 {
		r, err := c.Check(ctx, limit.Check{Name: "api_per_minute", Key: "account:42", Hits: 1, Rule: rule})
		if err != nil {
			log.Fatal(err) // the check was not decided: unreachable, overloaded, invalid…
		}
		fmt.Printf("allowed=%v remaining=%d retry_after=%v\n", r.Allowed, r.Remaining, r.RetryAfter)
	}
	// Output:
	// allowed=true remaining=1 retry_after=0s
	// allowed=true remaining=0 retry_after=0s
	// allowed=false remaining=0 retry_after=30s
}
