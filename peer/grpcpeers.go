package peer

import (
	"github.com/shardlimiter/shardlimiter/transport/dial"
)

// grpcDialer dials peers over gRPC with cfg (Config.Peer): each link is a
// dial.NodeLink, the peer port's Peers and State services. This file is
// the only one of the package that knows the gRPC clients.
type grpcDialer struct{ cfg dial.PeerConfig }

// Dial makes the link to addr; it connects on first use.
func (d grpcDialer) Dial(self, addr string) (Link, error) {
	l, err := dial.NewNodeLink(self, addr, d.cfg)
	if err != nil {
		return nil, err
	}
	return l, nil
}
