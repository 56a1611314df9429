package peer

import (
	"github.com/shardlimiter/shardlimiter/ring"
)

// The node as the Cluster service's source (api/native.MembershipSource):
// clients learn this node's ring and send each check to its owner. Both
// methods read the current view, lock-free, and may be called from any
// goroutine.

// RingVersion returns the version of the node's current ring snapshot.
func (n *Node) RingVersion() uint64 { return n.view.Load().snap.Version() }

// Membership returns the node's current ring: its members with their
// client gRPC addresses and the ring's Config, so that a client building
// ring.New from them gets this node's owners.
func (n *Node) Membership() ring.Membership {
	snap := n.view.Load().snap
	m := ring.Membership{
		Node:    n.cfg.Name,
		Version: snap.Version(),
		Members: make([]ring.Member, 0, snap.Len()),
		Config:  snap.Config(),
	}
	for i := range snap.Len() {
		mb := snap.Member(i)
		m.Members = append(m.Members, ring.Member{Name: mb.Name, Addr: mb.Addr})
	}
	return m
}

// MemberAddr returns the client gRPC address of the member called name
// (gubernator's metadata "owner" names the owner by it); "" when unknown.
func (n *Node) MemberAddr(name string) string { return n.member(name).Addr }

// member returns the member called name as this node knows it: from its
// ring, else from gossip (a node that has just joined); Addr is empty when
// it is unknown.
func (n *Node) member(name string) ring.Member {
	v := n.view.Load()
	if i := v.snap.IndexOf(name); i >= 0 {
		return v.snap.Member(i)
	}
	if g := n.cfg.Gossip; g != nil {
		for _, m := range g.Members() {
			if m.Name == name {
				return m
			}
		}
	}
	return ring.Member{Name: name}
}

// Owner returns the peer address of the owner of key by the node's current
// ring, and whether that owner is this node (api/rlqs routes its quota
// buckets by it). Lock-free; safe from any goroutine.
func (n *Node) Owner(key string) (addr string, self bool) {
	snap := n.view.Load().snap
	if snap.Len() == 0 {
		return "", true
	}
	m := snap.Owner(key)
	return peerAddr(m), m.Name == n.cfg.Name
}

// Backup returns the peer address of the node that would own key if this
// node left: where api/rlqs replicates its quota buckets. ok is false when
// this node is alone. Lock-free.
func (n *Node) Backup(key string) (addr string, ok bool) {
	b := n.view.Load().backup
	if b == nil {
		return "", false
	}
	return peerAddr(b.Owner(key)), true
}
