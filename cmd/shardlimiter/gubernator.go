package main

import (
	gubapi "github.com/shardlimiter/shardlimiter/api/gubernator"
)

// gubernatorConfig is gubernator's API (docs/GUBERNATOR.md) on the node:
// served on the client gRPC listener beside RateLimiter, and by its HTTP
// gateway with --gubernator-http-addr. Its checks go to the node directly:
// a gubernator item always carries its own limit and duration (no rules
// file lookup), and the node decides it on its owner like any other.
func (s *server) gubernatorConfig() gubapi.Config {
	return gubapi.Config{
		Checker:   s.node,
		Self:      s.node.Name(),
		OwnerAddr: s.node.MemberAddr,
		Health:    s.gubernatorHealth,
		Closing:   func() bool { return s.node.Cluster().Leaving },
	}
}

// gubernatorHealth is the node as gubernator's HealthCheck reports it:
// healthy once it is ready (joined, on its ring, not leaving), with every
// member's client gRPC address as a local peer.
func (s *server) gubernatorHealth() gubapi.Health {
	c := s.node.Cluster()
	h := gubapi.Health{Healthy: c.Ready, Self: s.grpcAddr}
	if !c.Ready {
		h.Message = "this instance is not ready: not yet joined, not on its ring, or leaving"
	}
	for _, m := range c.Members {
		h.Peers = append(h.Peers, m.Addr)
	}
	return h
}
