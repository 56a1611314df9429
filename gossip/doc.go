// Package gossip implements shardlimiter's cluster membership: which nodes
// are alive, and where each one takes forwarded checks and state transfers.
//
// # Model
//
// Every node runs hashicorp/memberlist with LAN-class failure detection
// tuned to declare a crashed node dead in about 3 s (see gossipConfig). A
// node joins the seeds it is given (host:port or DNS names, resolved at
// every attempt) and retries until one answers; once joined it rejoins the
// seeds that are not members every RejoinInterval, which merges clusters
// that started apart; it knocks on the members declared dead (not those
// that left) about every second, and a member that hears a knock joins the
// knocker, which merges the halves of a healed partition (heal.go); a node
// that has left rejoins no one. A node publishes its gRPC address in its gossip metadata
// (Meta); Members returns the alive members with that address, as
// ring.Member values, and Changed signals each change.
// Peers are identified by node name, never by address alone, so several
// nodes may share a host.
//
// The node (package peer) sees membership only through its peer.Gossip
// interface, which *Membership implements; this package knows nothing of
// routing or limits, and imports only ring.
//
// # Concurrency and lifecycle
//
// New checks the configuration and starts nothing. Run binds the sockets,
// joins in the background and serves gossip until its context ends, and
// returns once everything it started has exited. Every other method is
// safe for concurrent use, before, during and after Run.
package gossip
