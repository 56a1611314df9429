package main

import (
	"context"
	"fmt"
	"time"

	ratelimitpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typepb "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/shardlimiter/shardlimiter/limit"
)

// --api values.
const (
	apiNative = "native" // shardlimiter.v1.RateLimiter/GetRateLimits
	apiRLS    = "rls"    // Envoy's RateLimitService/ShouldRateLimit
)

// rlsDomain is the domain of the tool's ShouldRateLimit requests.
const rlsDomain = "loadtest"

// rlsChecker sends a call as one ShouldRateLimit request through
// go-control-plane's generated client, as Envoy would: one descriptor per
// check, {key: <the check's key>}, carrying the check's rule as a limit
// override (so that the node needs no rules file; overrides are fixed
// windows, whatever --algorithm says) and its hits as hits_addend.
type rlsChecker struct {
	conn *grpc.ClientConn
	c    rlspb.RateLimitServiceClient
}

func dialRLS(addrs []string, conns int) ([]*target, error) {
	return dialGenerated(addrs, conns, func(cc *grpc.ClientConn) checker {
		return rlsChecker{conn: cc, c: rlspb.NewRateLimitServiceClient(cc)}
	})
}

// dialGenerated opens conns connections to each address for a checker
// built on a generated client (wrap), plaintext unless dialOptions carry
// the --tls-* credentials.
func dialGenerated(addrs []string, conns int, wrap func(*grpc.ClientConn) checker) ([]*target, error) {
	var ts []*target
	for _, a := range addrs {
		t := &target{addr: a}
		ts = append(ts, t)
		for range conns {
			opts := append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, dialOptions...)
			cc, err := grpc.NewClient(a, opts...)
			if err != nil {
				closeTargets(ts)
				return nil, fmt.Errorf("dial %s: %w", a, err)
			}
			t.conns = append(t.conns, wrap(cc))
		}
	}
	return ts, nil
}

func (r rlsChecker) Close() error { return r.conn.Close() }

// GetRateLimits sends checks as descriptors and reads each status back as
// a result: OK is admitted, limit_remaining the remaining.
func (r rlsChecker) GetRateLimits(ctx context.Context, checks []limit.Check) ([]limit.Result, error) {
	req := &rlspb.RateLimitRequest{Domain: rlsDomain, Descriptors: make([]*ratelimitpb.RateLimitDescriptor, len(checks))}
	for i, c := range checks {
		req.Descriptors[i] = &ratelimitpb.RateLimitDescriptor{
			Entries:    []*ratelimitpb.RateLimitDescriptor_Entry{{Key: "key", Value: c.Key}},
			Limit:      rlsOverride(c.Rule),
			HitsAddend: wrapperspb.UInt64(uint64(max(c.Hits, 0))),
		}
	}
	resp, err := r.c.ShouldRateLimit(ctx, req)
	if err != nil {
		return nil, err // a shed keeps its RetryInfo (transport.IsShed)
	}
	if len(resp.Statuses) != len(checks) {
		return nil, fmt.Errorf("rls: %d statuses for %d descriptors", len(resp.Statuses), len(checks))
	}
	out := make([]limit.Result, len(checks))
	now := time.Now()
	for i, s := range resp.Statuses {
		out[i] = limit.Result{Decision: limit.Decision{
			Allowed:   s.Code == rlspb.RateLimitResponse_OK,
			Remaining: int64(s.LimitRemaining),
			ResetAt:   now.Add(s.GetDurationUntilReset().AsDuration()).UnixNano(),
		}}
	}
	return out, nil
}

// rlsOverride is r as a descriptor's limit override: requests_per_unit
// per Period, in seconds (checkRLSRule has checked that it is whole).
func rlsOverride(r limit.Rule) *ratelimitpb.RateLimitDescriptor_RateLimitOverride {
	o := &ratelimitpb.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: uint32(r.Limit), Unit: typepb.RateLimitUnit_SECOND}
	if n := uint32(r.Period / time.Second); n > 1 {
		o.UnitMultiplier = wrapperspb.UInt32(n)
	}
	return o
}

// checkRLSRule reports why r cannot travel as a limit override, or "".
func checkRLSRule(r limit.Rule) string {
	switch {
	case r.Period < time.Second || r.Period%time.Second != 0:
		return fmt.Sprintf("--api rls: the period must be whole seconds, got %v", r.Period)
	case r.Limit > 1<<32-1:
		return fmt.Sprintf("--api rls: the limit must fit in 32 bits, got %d", r.Limit)
	}
	return ""
}
