package main

import (
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/shardlimiter/shardlimiter/api/rlqs"
)

// newRLQS builds Envoy's quota service on the rules: its buckets are
// routed on the node's ring and reported to their owners over the peer
// port, under the peer TLS when it is on (docs/RLQS.md).
func (s *server) newRLQS(reg prometheus.Registerer) *rlqs.Service {
	var opts []grpc.DialOption
	if s.sec.peer != nil {
		opts = append(opts, grpc.WithTransportCredentials(credentials.NewTLS(s.sec.peer.ClientConfig())))
	}
	return rlqs.New(rlqs.Config{
		Rules:       s.rls.store,
		Router:      s.node,
		Node:        s.node.Name(),
		Interval:    s.cfg.rls.rlqsInterval,
		MaxStreams:  s.cfg.rls.rlqsMaxStreams,
		DialOptions: opts,
		PeerTimeout: s.cfg.peerTimeout,
		Registerer:  reg,
	})
}
