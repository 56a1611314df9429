// Package transport implements shardlimiter's wire: the shardlimiter.v1
// protobuf API served over gRPC and HTTP/JSON, and the batching gRPC client a
// node uses to forward checks to the owner of their key.
//
// The model is a batch in, a batch out. A server converts each wire request
// to a [limit.Check], hands the checks that converted to a [Checker] (the
// node) and answers every item in order: the Checker's [limit.Result] for the
// items it saw, a per-item error for those that did not convert. Protobuf
// types stop here; everything outside speaks the limit vocabulary. Status
// codes, gRPC and HTTP alike, are decided in this package alone (see [Code]).
//
// One codec, package transport/wire, encodes and decodes batches of
// checks and of results, and the key states of State.Push (handoff and
// replication), straight from and into the limit types, for the servers and
// the clients alike (see codec.go, messages.go and state.go). The generated
// protobuf types serve only the HTTP/JSON API (protojson, through the same
// conversions, see json.go), server reflection and State.Pull. Reading order: grpc.go → services.go → decide.go → messages.go
// → wire.
//
// Two services share one gRPC port: RateLimiter for clients and Peers for
// nodes. Peers is answered by a second Checker, the node's local-only path,
// so a check is forwarded at most once. [PeerClient] is the other end of
// Peers: it merges the checks of concurrent callers bound for one owner into
// shared RPCs without adding latency when the owner is idle (see batcher.go).
// [Client] is the public client of RateLimiter.
//
// gubernator's API, pb.gubernator.V1, is served beside RateLimiter by
// [Gubernator] (gubernator.go; its HTTP gateway in gubernatorhttp.go), from
// code generated in transport/gubpb: its items become checks of the
// gubernator algorithms, which only nodes send each other on Peers
// (shardlimiter.v1's own API refuses them).
//
// Overload: a server never queues work it cannot start. An [InFlight]
// bound (one per listener pool) admits a batch by its item count or refuses
// it at once with ResourceExhausted and a retry delay (HTTP: 429 with
// Retry-After), see [ErrOverloaded]. The client listeners' bound
// ([NewFairInFlight]) charges a call at its headers, on an estimate of its
// size settled once it is decoded, and shares the bound fairly between gRPC
// connections and HTTP client addresses (fair.go has the rule and why);
// HTTP bodies are reserved against a
// node-wide byte bound before they are read; [ConnLimits] bounds what one
// gRPC connection may hold and how long an idle or dead one stays open.
//
// Concurrency: servers, clients and [Metrics] are safe for concurrent use.
// Constructors start no goroutine; a [PeerClient] runs goroutines only while
// RPCs are in flight and none after Close returns.
package transport
