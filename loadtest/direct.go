package main

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/shardlimiter/shardlimiter/client"
	"github.com/shardlimiter/shardlimiter/limit"
)

// --client values.
const (
	clientPlain  = "plain"
	clientDirect = "direct"
)

// checker sends one call: a plain connection to one target
// (dial.Client) or the owner-aware client (--client direct).
type checker interface {
	GetRateLimits(ctx context.Context, checks []limit.Check) ([]limit.Result, error)
	Close() error
}

// directClient is package client behind the checker interface: a call of
// one check is a Check (what a middleware sends), a larger one a
// CheckBatch.
type directClient struct{ *client.Client }

func (d directClient) GetRateLimits(ctx context.Context, checks []limit.Check) ([]limit.Result, error) {
	if len(checks) != 1 {
		return d.CheckBatch(ctx, checks)
	}
	r, err := d.Check(ctx, checks[0])
	var ce *client.CheckError
	if err != nil && !errors.As(err, &ce) {
		return nil, err
	}
	return []limit.Result{r}, nil // an item error is in r, as from a plain call
}

// directWait bounds how long the tool waits for the client's first ring.
const directWait = 5 * time.Second

// dialDirect returns one target, named after addrs, whose only connection
// is an owner-aware client seeded with addrs, with maxInFlight RPC slots
// per node (0: the client's default), holding leases of its hot keys with
// leases. The client keeps one connection per node, so --conns does not
// apply.
func dialDirect(addrs []string, maxInFlight int, leases bool) ([]*target, error) {
	ctx, cancel := context.WithTimeout(context.Background(), directWait)
	defer cancel()
	c, err := client.New(ctx, client.Config{Targets: addrs, DialOptions: dialOptions, MaxInFlight: maxInFlight,
		Leases: leases, LeaseThreshold: 1})
	if err != nil {
		return nil, err
	}
	return []*target{{addr: "direct:" + strings.Join(addrs, ","), conns: []checker{directClient{c}}}}, nil
}
