package peer

import (
	"context"

	"github.com/shardlimiter/shardlimiter/limit"
	"github.com/shardlimiter/shardlimiter/transport"
)

// How a node reaches the other nodes: through a Link per peer, made by the
// node's Dialer (Config.Peers). The node knows no wire: over gRPC, the
// peer port (grpcpeers.go, the default); in memory, a MemNet (memnet.go),
// which runs many nodes in one process for tests and simulations.
//
// The peer set (peerset.go) keeps one Link per peer, keyed by node name,
// made on first use and closed when the peer leaves the ring or changes
// address; it suspends a peer after a failed forward.

// Dialer makes the links of a node to its peers.
type Dialer interface {
	// Dial returns a link from the node named self to the node at addr
	// (a member's peer address). It may be called with the peer set's
	// mutex held: it must not block on the network (a link connects on
	// first use).
	Dial(self, addr string) (Link, error)
}

// Link is what a node asks of one other node: the server side of that
// node (CheckLocal, Push, Pull, InspectLocal, Ring, Lease), one hop, never
// forwarded further. Errors are classified as transport's (ErrTimeout,
// ErrUnavailable, ErrClosed, ErrOverloaded with a RetryDelay): the node
// decides on them whether to suspend the peer, stand in for it or retry.
// Every method is safe for concurrent use.
type Link interface {
	// Forward has the other node decide checks: those it owns, the others
	// answered limit.NotOwner; with standin, all of them, as the stand-in
	// of their owner, which could not be reached. On an error the results,
	// when there are as many as checks, hold the answers of the items that
	// were decided and limit.Unavailable for those that never got there.
	// It keeps none of checks once it has returned (the node reuses the
	// slice).
	Forward(ctx context.Context, checks []limit.Check, standin bool) ([]limit.Result, error)
	// Push merges keys into the other node's tables; for a handoff,
	// partitions lists those this node hands over whole.
	Push(ctx context.Context, why limit.Transfer, partitions []int, keys []limit.KeyState) error
	// Pull takes over the other node's keys of r.Partitions, for this node
	// whose member list r describes (the link sets r.From).
	Pull(ctx context.Context, r limit.PullRequest) ([]limit.KeyState, error)
	// Inspect reads what the other node holds of c's key, spending
	// nothing.
	Inspect(ctx context.Context, c limit.Check) (limit.KeyView, error)
	// Ring describes the ring the other node routes by.
	Ring(ctx context.Context) (transport.RingInfo, error)
	// Lease asks the other node, the owner of r.Key, for a grant of the
	// key's capacity or releases one (lease.go); r.From is set by the link.
	Lease(ctx context.Context, r limit.LeaseRequest) (limit.LeaseGrant, error)
	// Close releases the link, waiting for its calls in flight; later
	// calls fail with transport.ErrClosed.
	Close() error
}
