package peer

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/shardlimiter/shardlimiter/transport"
)

// RingsInfo is the ring of every member of this node's ring, as each
// answered State's Ring call: whether the cluster agrees on its members.
// Served at /v1/cluster/rings.
type RingsInfo struct {
	Node string `json:"node"`
	// Members fingerprints this node's member list (16 hex digits).
	Members string `json:"members_fingerprint"`
	// Agree: every member answered with the same member list as this node.
	Agree bool       `json:"agree"`
	Rings []RingView `json:"rings"` // one per member, by name
	// AskedAt is when the members were asked (Unix ms): answers are kept
	// for RingsMaxAge.
	AskedAt int64 `json:"asked_at_ms"`
}

// RingView is one member's ring, or why it did not answer.
type RingView struct {
	Node        string   `json:"node"`
	RingVersion uint64   `json:"ring_version"` // the member's own counter: unrelated across nodes
	Members     string   `json:"members_fingerprint"`
	MemberNames []string `json:"members"`
	Ready       bool     `json:"ready"`
	Leaving     bool     `json:"leaving"`
	// Agrees: the member's member list is this node's.
	Agrees bool   `json:"agrees"`
	Error  string `json:"error,omitempty"`
}

// RingsMaxAge is how long Rings keeps its answer: pages polling every few
// seconds, however many, cost each member at most one Ring call a second.
const RingsMaxAge = time.Second

// ringsTimeout bounds the wait for one member's answer.
const ringsTimeout = time.Second

// ringsCache holds the last answer of Rings.
type ringsCache struct {
	mu   sync.Mutex // held while the members are asked: callers share one round
	at   time.Time
	last RingsInfo
}

// Ring describes the ring this node routes by (api/peers.RingReporter).
func (n *Node) Ring() transport.RingInfo {
	snap := n.view.Load().snap
	members := snap.Members()
	names := make([]string, len(members))
	for i, m := range members {
		names[i] = m.Name
	}
	slices.Sort(names)
	return transport.RingInfo{Node: n.cfg.Name, Version: snap.Version(), Members: fingerprint(members), Names: names,
		Ready: n.Ready(), Leaving: n.leaving.Load()}
}

// Rings asks every member of this node's ring for its ring (State's Ring
// call, in parallel, up to a second each) and compares their member lists
// with this node's. Answers younger than RingsMaxAge are reused. It is
// safe for concurrent use.
func (n *Node) Rings(ctx context.Context) RingsInfo {
	c := &n.rings
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.at.IsZero() && time.Since(c.at) < RingsMaxAge {
		return c.last
	}
	self := n.Ring()
	members := n.view.Load().snap.Members()
	views := make([]RingView, len(members))
	var wg sync.WaitGroup
	for i, m := range members {
		if m.Name == n.cfg.Name {
			views[i] = ringView(self)
			continue
		}
		wg.Go(func() {
			views[i] = RingView{Node: m.Name}
			sc, err := n.peers.link(m)
			if err == nil {
				ctx, cancel := context.WithTimeout(ctx, ringsTimeout)
				defer cancel()
				var info transport.RingInfo
				if info, err = sc.Ring(ctx); err == nil {
					views[i] = ringView(info)
				}
			}
			if err != nil {
				views[i].Error = err.Error()
			}
		})
	}
	wg.Wait()
	out := RingsInfo{Node: n.cfg.Name, Members: hex64(self.Members), Agree: true, Rings: views, AskedAt: time.Now().UnixMilli()}
	for i := range views {
		views[i].Agrees = views[i].Error == "" && views[i].Members == out.Members
		out.Agree = out.Agree && views[i].Agrees
	}
	slices.SortFunc(out.Rings, func(a, b RingView) int { return strings.Compare(a.Node, b.Node) })
	c.at, c.last = time.Now(), out
	return out
}

func ringView(r transport.RingInfo) RingView {
	return RingView{Node: r.Node, RingVersion: r.Version, Members: hex64(r.Members), MemberNames: r.Names,
		Ready: r.Ready, Leaving: r.Leaving}
}

// hex64 writes a fingerprint as 16 hex digits (JSON numbers lose the low
// bits of a uint64 in JavaScript).
func hex64(v uint64) string {
	return fmt.Sprintf("%016x", v)
}
