package rls_test

import (
	"context"
	"fmt"
	"time"

	ratelimitpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/shardlimiter/shardlimiter/peer"
	"github.com/shardlimiter/shardlimiter/rls"
	"github.com/shardlimiter/shardlimiter/rules"
)

// A Service on a single node (no gossip: it owns every key) with one rule:
// three messages per number per day.
func Example() {
	set, err := rules.Parse("rules.yaml", []byte(`
domain: messaging
descriptors:
  - key: to_number
    rate_limit: {unit: day, requests_per_unit: 3, name: per_number}
`))
	if err != nil {
		fmt.Println(err)
		return
	}
	node, err := peer.New(peer.Config{Name: "solo"})
	if err != nil {
		fmt.Println(err)
		return
	}
	svc := rls.New(rls.Config{Checker: node, Rules: rules.NewStore(set)})

	req := &rlspb.RateLimitRequest{Domain: "messaging", Descriptors: []*ratelimitpb.RateLimitDescriptor{{
		Entries: []*ratelimitpb.RateLimitDescriptor_Entry{{Key: "to_number", Value: "2061111111"}},
	}}}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for range 4 {
		resp, err := svc.ShouldRateLimit(ctx, req)
		if err != nil {
			fmt.Println(err)
			return
		}
		st := resp.Statuses[0]
		fmt.Println(resp.OverallCode, st.CurrentLimit.Name, st.LimitRemaining)
	}
	// Output:
	// OK per_number 2
	// OK per_number 1
	// OK per_number 0
	// OVER_LIMIT per_number 0
}
