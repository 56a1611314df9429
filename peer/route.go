package peer

import (
	"context"
	"fmt"
	"sync"

	"github.com/shardlimiter/shardlimiter/limit"
	"github.com/shardlimiter/shardlimiter/ring"
)

// Check answers a client batch: results[i] answers checks[i]. Items owned
// here are decided at once; the others are forwarded to their owners, one
// RPC per owner, all owners in parallel. Every item is answered: a decision,
// a fail-policy decision when its owner cannot be reached, or an item error.
func (n *Node) Check(ctx context.Context, checks []limit.Check) ([]limit.Result, error) {
	now := n.cfg.Now().UnixNano()
	res := make([]limit.Result, len(checks))
	v := n.view.Load()
	members := v.snap.Members()
	kb := n.keyBufs.Get().(*keyBuf)
	defer n.keyBufs.Put(kb)

	var remote [][]int // by owner index: the items to forward there
	for i := range checks {
		c := &checks[i]
		if err := c.Validate(); err != nil {
			res[i] = limit.Failed(limit.Invalid, err)
			continue
		}
		o := v.snap.OwnerIndex(c.Key)
		if o == v.self {
			res[i] = n.decide(kb, c, now)
			continue
		}
		if remote == nil {
			remote = make([][]int, len(members))
		}
		remote[o] = append(remote[o], i)
	}
	if remote == nil {
		return res, nil
	}
	var wg sync.WaitGroup
	last := -1
	for o, items := range remote {
		if len(items) == 0 {
			continue
		}
		if prev := last; prev >= 0 {
			wg.Go(func() { n.forward(ctx, members[prev], checks, remote[prev], res, now) })
		}
		last = o
	}
	// The last group is forwarded on this goroutine: a batch with one
	// remote owner, the common case, starts no goroutine.
	n.forward(ctx, members[last], checks, remote[last], res, now)
	wg.Wait()
	return res, nil
}

// CheckLocal answers a batch forwarded by a peer: every valid item is
// decided here, whoever the ring says owns it, so a check crosses at most
// one hop even while two nodes' rings disagree.
func (n *Node) CheckLocal(ctx context.Context, checks []limit.Check) ([]limit.Result, error) {
	now := n.cfg.Now().UnixNano()
	res := make([]limit.Result, len(checks))
	kb := n.keyBufs.Get().(*keyBuf)
	defer n.keyBufs.Put(kb)
	for i := range checks {
		if err := checks[i].Validate(); err != nil {
			res[i] = limit.Failed(limit.Invalid, err)
			continue
		}
		res[i] = n.decide(kb, &checks[i], now)
	}
	return res, nil
}

// decide applies a valid check to this node's table.
func (n *Node) decide(kb *keyBuf, c *limit.Check, now int64) limit.Result {
	d := n.limiters[c.Rule.Algorithm].Take(kb.key(c.Name, c.Key), now, c.Rule, c.Hits)
	return limit.Result{Decision: d, Owner: n.cfg.Name}
}

// forward sends the items idx of checks to owner and writes their answers
// into res; when the owner cannot be reached the fail policy answers them.
func (n *Node) forward(ctx context.Context, owner ring.Member, checks []limit.Check, idx []int, res []limit.Result, now int64) {
	sub := make([]limit.Check, len(idx))
	for j, i := range idx {
		sub[j] = checks[i]
	}
	out, err := n.peers.forward(ctx, owner, sub)
	if err == nil && len(out) != len(sub) {
		err = fmt.Errorf("peer: %s answered %d of %d checks", owner.Name, len(out), len(sub))
	}
	// On a failed forward the client still returns what the owner answered
	// (items it decided) next to the items that never got there (marked
	// Unavailable): keep the former, so no hit is counted on two nodes.
	failed := idx[:0:0]
	for j, i := range idx {
		if err == nil || len(out) == len(sub) && out[j].Reason != limit.Unavailable {
			res[i] = out[j]
		} else {
			failed = append(failed, i)
		}
	}
	if len(failed) == 0 {
		return
	}
	idx = failed
	if cerr := ctx.Err(); cerr != nil {
		// The caller is gone: nobody reads these answers, and deciding them
		// here could count hits the owner already counted.
		for _, i := range idx {
			res[i] = limit.Failed(limit.Internal, cerr)
		}
		return
	}
	n.log.Debug("forward failed", "owner", owner.Name, "checks", len(idx), "err", err)
	n.m.fallback[n.cfg.FailPolicy].Add(float64(len(idx)))
	switch n.cfg.FailPolicy {
	case FailOpen:
		for _, i := range idx {
			res[i] = limit.Result{Decision: openDecision(now), Owner: n.cfg.Name}
		}
	case FailClosed:
		for _, i := range idx {
			res[i] = limit.Failed(limit.Unavailable, fmt.Errorf("owner %s unreachable: %w", owner.Name, err))
		}
	default:
		kb := n.keyBufs.Get().(*keyBuf)
		for _, i := range idx {
			res[i] = n.decide(kb, &checks[i], now)
		}
		n.keyBufs.Put(kb)
	}
}
