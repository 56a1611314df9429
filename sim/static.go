package sim

import (
	"context"
	"time"

	"github.com/shardlimiter/shardlimiter/ring"
)

// staticGossip is a peer.Gossip whose members never change: every member
// of a cluster formed by FormStatic holds the same list. It serves
// measurements of a formed ring (forwarding, replication) at sizes whose
// forming, each member rebuilding its ring on each of N joins, costs more
// CPU than the machine has.
type staticGossip struct {
	members []ring.Member
	changed chan struct{}
}

func newStaticGossip(members []ring.Member) *staticGossip {
	g := &staticGossip{members: members, changed: make(chan struct{}, 1)}
	g.changed <- struct{}{} // one rebuild, at the node's start
	return g
}

func (g *staticGossip) Run(ctx context.Context) error {
	<-ctx.Done()
	return nil
}

func (g *staticGossip) Members() []ring.Member            { return g.members }
func (g *staticGossip) Changed() <-chan struct{}          { return g.changed }
func (g *staticGossip) Joined() bool                      { return true }
func (g *staticGossip) Leave(timeout time.Duration) error { return nil }

// FormStatic starts n members that all know the ring of n from the start
// (no gossip runs: Member.Gossip is nil) and waits up to timeout until
// every one routes by it. Only the scenarios that need no membership
// change run on it (idle, forward, replicate).
func (c *Cluster) FormStatic(n int, timeout time.Duration) (time.Duration, error) {
	start := time.Now()
	ms := make([]ring.Member, n)
	for i := range ms {
		ip := addr(i + 1)
		ms[i] = ring.Member{Name: memberName(i), Addr: ip + ":8081", PeerAddr: ip + ":8082"}
	}
	for i := range n {
		ip := addr(i + 1)
		m := &Member{Name: ms[i].Name, GossipAddr: ip + ":7946", PeerAddr: ms[i].PeerAddr, done: make(chan struct{})}
		if err := c.newNode(m, ms[i].Addr, newStaticGossip(ms)); err != nil {
			return 0, err
		}
		c.run(m, m.Node.Run)
		c.mu.Lock()
		c.running = append(c.running, m)
		c.seq++
		c.mu.Unlock()
	}
	return c.WaitAgree(start, timeout)
}
