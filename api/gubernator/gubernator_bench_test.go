package gubernator

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/shardlimiter/shardlimiter/transport"
	"github.com/shardlimiter/shardlimiter/transport/server"

	"github.com/shardlimiter/shardlimiter/api/gubernator/gubpb"
	"github.com/shardlimiter/shardlimiter/limit"
)

// BenchmarkGubernatorBatch100 answers a 100-item gubernator batch through
// getRateLimits with a checker that decides at once, two thirds of the
// items "decided" by two other nodes (as on a member of three): the
// conversion both ways and the response's messages, without gRPC.
//
//	go test -run '^$' -bench GubernatorBatch100 -benchmem -count 6 ./api/gubernator/
func BenchmarkGubernatorBatch100(b *testing.B) {
	owners := []string{"self", "node-b", "node-c"}
	l := server.NewClientListener(server.Config{})
	defer l.Stop()
	g := Register(l, Config{
		Self:      "self",
		OwnerAddr: func(name string) string { return name + ":8081" },
		Checker: transport.CheckerFunc(func(_ context.Context, checks []limit.Check) ([]limit.Result, error) {
			out := make([]limit.Result, len(checks))
			for i := range out {
				out[i] = limit.Result{Decision: limit.Decision{Allowed: true, Remaining: 9, ResetAt: int64(time.Minute)}, Owner: owners[i%3]}
			}
			return out, nil
		}),
	})
	req := &gubpb.GetRateLimitsReq{}
	for i := range 100 {
		req.Requests = append(req.Requests, &gubpb.RateLimitReq{Name: "bench", UniqueKey: "k" + strconv.Itoa(i), Hits: 1, Limit: 10, Duration: 60_000})
	}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		resp, err := g.GetRateLimits(ctx, req)
		if err != nil || len(resp.Responses) != 100 || resp.Responses[1].Metadata["owner"] != "node-b:8081" {
			b.Fatalf("%v %v", resp, err)
		}
	}
}
