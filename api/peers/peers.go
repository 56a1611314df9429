// Package peers implements the node-to-node API on the peer listener
// (--peer-addr): shardlimiter.v1.Peers, which decides forwarded checks on
// their owner and never forwards again (one hop at most), and
// shardlimiter.v1.State, which moves key states between nodes (handoff and
// replication pushes, pulls, inspection of what a node holds, its ring).
// The clients of both are package transport/dial's PeerClient and
// StateClient. It registers itself on the listener it is given.
package peers

import (
	"github.com/shardlimiter/shardlimiter/transport"
	"github.com/shardlimiter/shardlimiter/transport/pb"
	"github.com/shardlimiter/shardlimiter/transport/server"
)

// Register registers Peers, answered by local, and State, answered by
// state, on the peer listener l. local must decide on this node alone and
// never forward again, so that a check takes one hop at most. A nil state
// registers no State service. Every call of both takes units of l's
// bound and is refused at its headers while the bound is full.
func Register(l *server.Listener, local transport.Checker, state StateService) {
	l.RegisterChecks(&pb.Peers_ServiceDesc, local, server.Peers)
	if state != nil {
		l.Register(stateServiceDesc(), &stateServer{s: state, l: l}, server.Shed("Push", "Pull", "Lease"))
	}
}
