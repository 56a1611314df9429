package transport

import (
	"context"
	"time"

	"google.golang.org/grpc/metadata"

	"github.com/shardlimiter/shardlimiter/transport/pb"
)

// What the two ends of shardlimiter's own services agree on: their names,
// the bounds of their messages, keepalive, and the stand-in mark.

// Keepalive: what the servers enforce and the node's own clients send.
const (
	// MinPingInterval is the enforcement policy of every server: a client
	// may ping at most this often, with or without RPCs in progress;
	// more often is answered with GOAWAY "too_many_pings". Clients'
	// keepalive.ClientParameters.Time must not be shorter.
	MinPingInterval = 10 * time.Second
	// PeerKeepaliveTime and PeerKeepaliveTimeout are the keepalive of the
	// node's own peer and state clients: an owner that vanished without
	// closing its connection is noticed within ~25 s even while nothing
	// is forwarded to it. PeerKeepaliveTime ≥ MinPingInterval.
	PeerKeepaliveTime    = 20 * time.Second
	PeerKeepaliveTimeout = 5 * time.Second
)

// StandinHeader marks a Peers call whose checks the receiver decides as the
// stand-in of their unreachable owner (see dial.PeerConfig.Standin).
const StandinHeader = "shardlimiter-standin"

// IsStandin reports whether the Peers call of ctx asks the receiver to
// decide its checks as the stand-in of their owner, which could not be
// reached: the receiver holds their replicas.
func IsStandin(ctx context.Context) bool {
	md, ok := metadata.FromIncomingContext(ctx)
	return ok && len(md.Get(StandinHeader)) > 0
}

// WithStandin returns ctx marked as a stand-in call, as the receiver of a
// stand-in forward sees it (for tests of the receiving side).
func WithStandin(ctx context.Context) context.Context {
	return metadata.NewIncomingContext(ctx, metadata.Pairs(StandinHeader, "1"))
}

// RingInfo is the ring a node routes by, as State's Ring call reports it.
type RingInfo struct {
	Node    string
	Version uint64 // tells this node's rings apart; unrelated across nodes
	// Members fingerprints the member list (as StateService.Pull's
	// members): equal fingerprints, same members.
	Members uint64
	Names   []string // the members' names, sorted
	Ready   bool     // joined and owning its ring slice
	Leaving bool
}

// MaxStateMessage bounds a State message, in bytes, both ways; senders
// split larger transfers. It is also the gRPC receive limit of the server
// and the clients for State calls.
const MaxStateMessage = 16 << 20

// StateTimeout is the least time a State call is given (PeerConfig.Timeout
// when longer).
const StateTimeout = 2 * time.Second

const (
	StreamRateLimitsMethod = pb.RateLimiter_StreamRateLimits_FullMethodName
	StreamForwardMethod    = pb.Peers_StreamForwardRateLimits_FullMethodName
)

// Service names, as registered and as reported by health and reflection.
const (
	RateLimiterService = "shardlimiter.v1.RateLimiter"
	PeersService       = "shardlimiter.v1.Peers"
	StateServiceName   = "shardlimiter.v1.State"
)

// FlowWindow is the HTTP/2 flow-control window, per stream and per
// connection, in bytes, that the node's gRPC servers and its peer clients
// grant: a fixed window instead of gRPC's dynamic one. The dynamic window
// is sized by BDP estimation: the receiver of data pings the sender and
// times the answer, again on the first data after every answer, so at a
// moderate load nearly every RPC cost a ping and its ack, two more write
// system calls and wake-ups across the two processes (a third of an
// owner's writes at 2,000 forwarded RPCs/s). 256 KiB holds several
// batches of the default maximum size in flight and passes ~500 MB/s per
// connection at 0.5 ms round trip; a message larger than the window (up
// to the receive limit) still arrives, in more round trips. It also bounds
// what one connection can make a server buffer unread.
const FlowWindow = 256 << 10

// ClusterServiceName is the Cluster service, as registered and as health
// reports it.
const ClusterServiceName = "shardlimiter.v1.Cluster"

// InspectServiceName is the inspection service, as registered and as
// health reports it.
const InspectServiceName = "shardlimiter.v1.Inspect"

// LeasesServiceName is the client listener's lease service (api/lease),
// through which a client process holds leases of hot keys. Its one
// method, LeaseMethod, speaks State.Lease's messages (pb.LeaseRequest,
// pb.LeaseResponse); the request's from is the client's instance name.
const (
	LeasesServiceName = "shardlimiter.v1.Leases"
	LeaseMethod       = pb.Leases_Lease_FullMethodName
)

// DefaultMaxBatch is the default bound on items per call (--max-batch).
const DefaultMaxBatch = 1000

// maxItemBytes bounds the encoding of one valid check: a 128-byte name, a
// 1024-byte key, seven varints and the framing take ~1.2 KiB; the rest is
// room for unknown fields of newer clients.
const maxItemBytes = 2 << 10

// MaxRequestBytes returns the gRPC receive limit that fits a batch of
// maxBatch valid checks: 2 KiB per check plus 64 KiB. At the default
// batch of 1000 it is ~2 MiB, half gRPC's own default: a client cannot
// make the server buffer much more than a legal batch per stream.
func MaxRequestBytes(maxBatch int) int {
	if maxBatch <= 0 {
		maxBatch = DefaultMaxBatch
	}
	return maxBatch*maxItemBytes + 64<<10
}
