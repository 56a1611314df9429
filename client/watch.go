package client

import (
	"context"
	"errors"
	"time"

	"github.com/shardlimiter/shardlimiter/ring"
	"github.com/shardlimiter/shardlimiter/transport/dial"
)

// Backoff of the ring watch between two streams: it starts at watchRetry
// and doubles up to watchRetryMax while watches keep failing; a stream that
// delivered a ring resets it.
const (
	watchRetry    = 100 * time.Millisecond
	watchRetryMax = 5 * time.Second
)

// watch keeps a WatchMembers stream open to one node, installing each ring
// it sends, until ctx is done. When a stream ends it opens the next on
// another node: the targets first, then the members it knows. first is
// called after the first ring or the first failure.
func (c *Client) watch(ctx context.Context, first func()) {
	wait := watchRetry
	for i := 0; ; i++ {
		got := false
		err := c.watchNode(i).bc.WatchMembers(ctx, func(m ring.Membership) {
			c.update(m)
			got = true
			first()
		})
		first()
		if ctx.Err() != nil {
			return
		}
		switch {
		case got:
			wait = watchRetry
			continue // the node went away after serving: try the next at once
		case errors.Is(err, dial.ErrNoCluster):
			wait = watchRetryMax // an older node: routing waits for a newer one
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		wait = min(2*wait, watchRetryMax)
	}
}

// watchNode returns the node of the i-th watch: the targets in turn, then
// the members of the current ring in turn.
func (c *Client) watchNode(i int) *dest {
	candidates := c.seeds
	if r := c.routes.Load(); r != nil {
		candidates = append(candidates[:len(candidates):len(candidates)], r.dests...)
	}
	return candidates[i%len(candidates)]
}
