package main

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/shardlimiter/shardlimiter/api/lease"
	tserver "github.com/shardlimiter/shardlimiter/transport/server"
)

// registerClientLeases registers the client lease service (api/lease) on
// the client listener l: client processes may hold leases when the
// listener requires client certificates (--tls-client-ca-file) or, for
// development and unauthenticated, with --client-leases; others are
// refused with PermissionDenied, logged and counted in
// shardlimiter_client_lease_calls_total{result="refused"}. Grants need
// --leases as well: without it the node grants nothing.
func (s *server) registerClientLeases(l *tserver.Listener, reg prometheus.Registerer) {
	access := lease.Nobody
	switch {
	case s.cfg.clientLeases:
		access = lease.Anyone
		s.log.Warn("client leases are not authenticated (--client-leases): any client that reaches --grpc-addr can hold leases of any key's capacity; use --tls-client-ca-file outside development")
	case s.sec.clientCA:
		access = lease.Certified
	}
	svc := lease.Register(l, s.node, lease.Config{Access: access, Logger: s.log.With("component", "client-lease")})
	for _, r := range []struct {
		result string
		n      func(lease.Counts) uint64
	}{
		{"granted", func(c lease.Counts) uint64 { return c.Granted }},
		{"denied", func(c lease.Counts) uint64 { return c.Denied }},
		{"empty", func(c lease.Counts) uint64 { return c.Empty }},
		{"not_owner", func(c lease.Counts) uint64 { return c.NotOwner }},
		{"refused", func(c lease.Counts) uint64 { return c.Refused }},
		{"invalid", func(c lease.Counts) uint64 { return c.Invalid }},
		{"failed", func(c lease.Counts) uint64 { return c.Failed }},
	} {
		reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
			Namespace: "shardlimiter", Subsystem: "client_lease", Name: "calls_total",
			Help:        "Lease calls of client processes (shardlimiter.v1.Leases), by result: granted (some hits), denied (a deny lease: the key is over its limit), empty (nothing granted, or a release alone), not_owner (asked of a node that does not decide the key), refused (PermissionDenied: client leases need mTLS or --client-leases), invalid, failed.",
			ConstLabels: prometheus.Labels{"result": r.result},
		}, func() float64 { return float64(r.n(svc.Counts())) }))
	}
}
