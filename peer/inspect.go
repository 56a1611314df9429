package peer

import (
	"context"
	"fmt"

	"github.com/shardlimiter/shardlimiter/bucket"
	"github.com/shardlimiter/shardlimiter/limit"
	"github.com/shardlimiter/shardlimiter/ring"
	"github.com/shardlimiter/shardlimiter/table"
	"github.com/shardlimiter/shardlimiter/transport"
	"github.com/shardlimiter/shardlimiter/window"
)

// Inspection: an operator reads a key's state without spending.
//
// A peek (a check of 0 hits) is not enough: a peek under a rule other than
// the one the key was last taken under rescales the key's state to the new
// rule, which changes what later checks see. So a node reads a key by
// exporting its state (as a handoff does: a few loads under the key's
// lock, no LRU touch, no change mark) into a scratch table of one key, and
// peeks there. Nothing of the node's tables changes; a key the node does
// not hold is answered as a fresh key, and not created.

// InspectLocal reads what this node holds of c's key under c's rule,
// whoever owns it (api/peers.LocalInspector). c.Hits and the RESET flag
// are ignored. Safe for concurrent use.
func (n *Node) InspectLocal(_ context.Context, c limit.Check) (limit.KeyView, error) {
	c.Hits, c.Chained = 0, false
	c.Rule.Behavior &^= limit.Reset
	if err := c.Validate(); err != nil {
		return limit.KeyView{}, fmt.Errorf("%w: %w", transport.ErrInvalidArgument, err)
	}
	var kb keyBuf
	key := kb.key(c.Name, c.Key)
	now := n.cfg.Now().UnixNano()
	v := limit.KeyView{Node: n.cfg.Name, Limit: c.Rule.Limit}
	state, held := n.limiters[c.Rule.Algorithm].Export(key, now)
	scratch := scratchLimiter(c.Rule.Algorithm)
	if held {
		if err := scratch.Import(key, state, now, false); err != nil {
			v.Error = fmt.Sprintf("peer: reading the key's state: %v", err)
			return v, nil
		}
		if a := c.Rule.Algorithm; a == limit.FixedWindow || a == limit.SlidingWindow || a == limit.SlidingLog {
			if counts, err := window.StateCounts(state, now, c.Rule); err == nil {
				v.WindowEnd, v.Previous, v.Current = counts.WindowEnd, counts.Previous, counts.Current
			}
		}
	}
	v.Held = held
	v.Decision = scratch.Take(key, now, c.Rule, 0)
	v.Leases = n.mv.leases.grantsOf(key, now)
	return v, nil
}

// scratchLimiter is a table of one key for algorithm a.
func scratchLimiter(a limit.Algorithm) limiter {
	tc := table.Config{MaxKeys: 1, Shards: 1}
	switch a {
	case limit.LeakyBucket:
		return bucket.NewLeakyBucket(tc)
	case limit.FixedWindow:
		return window.NewFixed(tc)
	case limit.SlidingWindow:
		return window.NewSliding(tc)
	case limit.SlidingLog:
		return window.NewLog(tc)
	}
	return bucket.NewTokenBucket(tc)
}

// Inspect reads c's key on its owner, and on the node that holds its
// replica when replication is on (api/inspect.Inspector): the owner as this
// node routes the key now, asked over the peer port when it is another
// node. A node that cannot be asked is answered in its view's Error. c's
// rule must be filled in. Safe for concurrent use.
func (n *Node) Inspect(ctx context.Context, c limit.Check) (limit.Inspection, error) {
	c.Hits, c.Chained = 0, false
	c.Rule.Behavior &^= limit.Reset
	if err := c.Validate(); err != nil {
		return limit.Inspection{}, fmt.Errorf("%w: %w", transport.ErrInvalidArgument, err)
	}
	v := n.view.Load()
	owner := v.snap.Owner(c.Key)
	if n.ho.busy() {
		if self, to, _ := n.markedRoute(v, c.Key); self {
			owner = n.selfMember()
		} else if to.Name != "" {
			owner = to
		}
	}
	var res limit.Inspection
	res.Owner = n.inspectAt(ctx, owner, c)
	if n.cfg.ReplicationInterval > 0 && v.snap.Len() > 1 {
		if w := v.without(owner.Name); w != nil {
			res.Replica = n.inspectAt(ctx, w.Owner(c.Key), c)
		}
	}
	return res, nil
}

// inspectAt reads c's key on m.
func (n *Node) inspectAt(ctx context.Context, m ring.Member, c limit.Check) limit.KeyView {
	if m.Name == n.cfg.Name {
		v, err := n.InspectLocal(ctx, c)
		if err != nil {
			return limit.KeyView{Node: m.Name, Error: err.Error()}
		}
		return v
	}
	failed := func(err error) limit.KeyView {
		return limit.KeyView{Node: m.Name, Limit: c.Rule.Limit, Error: err.Error()}
	}
	if peerAddr(m) == "" {
		m = n.member(m.Name)
	}
	st, err := n.peers.link(m)
	if err != nil {
		return failed(err)
	}
	kv, err := st.Inspect(ctx, c)
	if err != nil {
		return failed(err)
	}
	kv.Node = m.Name
	return kv
}
