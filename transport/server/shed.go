package server

import (
	"context"

	"github.com/shardlimiter/shardlimiter/transport"

	"github.com/shardlimiter/shardlimiter/limit"
)

// Load shedding for services registered beside the checks services (and
// handlers wrapped around the HTTP API, such as package rls's): the same
// in-flight bound, the same refusal, status codes and metric as the
// RateLimiter service and POST /v1/GetRateLimits.

// BoundChecker returns a transport.Checker that passes a call to next only when its
// checks fit under b (one unit per check, as the native API counts them;
// see [InFlight]) and holds them until next returns. A call that does not
// fit is refused at once with an error wrapping transport.ErrOverloaded, counted in m
// as a shed of listener (ListenerGRPC or ListenerHTTP; another name counts
// nothing). A nil b bounds nothing. It is safe for concurrent use if next is.
func BoundChecker(next transport.Checker, b *InFlight, m *Metrics, listener string) transport.Checker {
	if b == nil {
		return next
	}
	l := -1
	for i, name := range listenerNames {
		if name == listener {
			l = i
		}
	}
	return &boundChecker{next: next, b: b, m: m, listener: l}
}

type boundChecker struct {
	next     transport.Checker
	b        *InFlight
	m        *Metrics
	listener int // listener* index, -1: not counted
}

func (c *boundChecker) Check(ctx context.Context, checks []limit.Check) ([]limit.Result, error) {
	units, err := c.b.acquireChecks(len(checks), c.m, c.listener)
	if err != nil {
		return nil, err
	}
	defer c.b.Release(units)
	return c.next.Check(ctx, checks)
}
