// Package dial implements the client side of shardlimiter's wire: the
// clients a node uses to reach other nodes, and the clients of the public
// API.
//
// [PeerClient] forwards checks to the owner of their key over the Peers
// service: it merges the checks of concurrent callers bound for one owner
// into shared RPCs without adding latency when the owner is idle
// (batcher.go has the rule), each RPC slot over a long-lived stream
// (streamclient.go). [StateClient] moves key states (handoff, replication),
// reads what a node holds of a key, and asks a node for its ring.
// [Client] is the plain client of RateLimiter; [BatchClient] is the Go
// client's batching client of RateLimiter and Cluster (package client).
//
// Failures are classified by the errors of package transport
// (transport.ErrUnavailable, transport.ErrTimeout, transport.ErrOverloaded,
// transport.ErrClosed), found with errors.Is.
//
// Concurrency: the clients and [Metrics] are safe for concurrent use. A
// PeerClient runs goroutines only while RPCs are in flight and none after
// Close returns.
package dial
