// Package server implements the server side of shardlimiter's wire: the
// node's gRPC listeners and its HTTP listener, on which each API package
// registers its services and routes, as handlers do on a ServeMux; the
// listeners know no API by name.
//
// A [Listener] is one gRPC port: NewClientListener for clients,
// NewPeerListener for other nodes. An API registers a generated service
// with Register (with [Shed] for the methods that take units of the
// bound), or a service that carries batches of checks with RegisterChecks,
// whose requests and answers the codec encodes straight from and into the
// limit types (messages.go, services.go, streams in streamserver.go). The
// [HTTP] listener holds the routes (Handle), the probes and the admission
// every HTTP API shares.
//
// Overload: a listener never queues work it cannot start. An [InFlight]
// bound (one per listener pool) admits a batch by its item count or
// refuses it at once with ResourceExhausted and a retry delay (HTTP: 429
// with Retry-After), see transport.ErrOverloaded. The client listeners'
// bound ([NewFairInFlight]) charges a call at its headers, on an estimate
// of its size settled once it is decoded, and shares the bound fairly
// between gRPC connections and HTTP client addresses (fair.go has the rule
// and why); HTTP bodies are reserved against a node-wide byte bound before
// they are read; [ConnLimits] bounds what one gRPC connection may hold and
// how long an idle or dead one stays open. TLS listeners and credentials
// count and log refused handshakes (tls.go).
//
// Reading order: listener.go → services.go → decide.go → messages.go →
// transport/wire.
//
// Concurrency: listeners, bounds and [Metrics] are safe for concurrent use;
// registration happens before Serve. Constructors start nothing but gRPC's
// stream workers, which Stop and GracefulStop end.
package server
