package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc"

	"github.com/shardlimiter/shardlimiter/api/gubernator/gubpb"
	"github.com/shardlimiter/shardlimiter/limit"
)

// apiGubernator: gubernator's pb.gubernator.V1/GetRateLimits, which a
// node serves on its client port (docs/GUBERNATOR.md) and gubernator
// itself serves too, so one tool measures both.
const apiGubernator = "gubernator"

// gubChecker sends a call as one pb.gubernator.V1/GetRateLimits request
// through the generated client: one RateLimitReq per check, its rule as
// gubernator's limit, duration (ms), algorithm and burst.
type gubChecker struct {
	conn *grpc.ClientConn
	c    gubpb.V1Client
}

func dialGubernator(addrs []string, conns int) ([]*target, error) {
	return dialGenerated(addrs, conns, func(cc *grpc.ClientConn) checker {
		return gubChecker{conn: cc, c: gubpb.NewV1Client(cc)}
	})
}

func (g gubChecker) Close() error { return g.conn.Close() }

// GetRateLimits sends checks as RateLimitReqs and reads each response back
// as a result: UNDER_LIMIT is admitted; an item's error fails that item.
func (g gubChecker) GetRateLimits(ctx context.Context, checks []limit.Check) ([]limit.Result, error) {
	req := &gubpb.GetRateLimitsReq{Requests: make([]*gubpb.RateLimitReq, len(checks))}
	for i, c := range checks {
		req.Requests[i] = gubRequest(c)
	}
	resp, err := g.c.GetRateLimits(ctx, req)
	if err != nil {
		return nil, err // a shed keeps its RetryInfo (transport.IsShed)
	}
	if len(resp.Responses) != len(checks) {
		return nil, fmt.Errorf("gubernator: %d responses for %d requests", len(resp.Responses), len(checks))
	}
	out := make([]limit.Result, len(checks))
	for i, r := range resp.Responses {
		if r.Error != "" {
			out[i] = limit.Failed(limit.Invalid, errors.New(r.Error))
			continue
		}
		out[i] = limit.Result{Decision: limit.Decision{
			Allowed:   r.Status == gubpb.Status_UNDER_LIMIT,
			Remaining: r.Remaining,
			ResetAt:   r.ResetTime * int64(time.Millisecond),
		}}
	}
	return out, nil
}

// gubRequest is c in gubernator's terms (checkGubernatorRule has checked
// that its rule has them).
func gubRequest(c limit.Check) *gubpb.RateLimitReq {
	a := gubpb.Algorithm_TOKEN_BUCKET
	if c.Rule.Algorithm == limit.LeakyBucket {
		a = gubpb.Algorithm_LEAKY_BUCKET
	}
	return &gubpb.RateLimitReq{
		Name: c.Name, UniqueKey: c.Key, Hits: c.Hits,
		Limit: c.Rule.Limit, Duration: c.Rule.Period.Milliseconds(),
		Algorithm: a, Burst: c.Rule.Burst,
	}
}

// checkGubernatorRule reports why r cannot travel in gubernator's API, or "".
func checkGubernatorRule(r limit.Rule) string {
	switch {
	case r.Algorithm != limit.TokenBucket && r.Algorithm != limit.LeakyBucket:
		return fmt.Sprintf("--api gubernator: gubernator has TOKEN_BUCKET and LEAKY_BUCKET only, got %v", r.Algorithm)
	case r.Period < time.Millisecond || r.Period%time.Millisecond != 0:
		return fmt.Sprintf("--api gubernator: the period must be whole milliseconds, got %v", r.Period)
	}
	return ""
}
