package dial

import (
	"context"
	"sync"

	"github.com/shardlimiter/shardlimiter/limit"
	"github.com/shardlimiter/shardlimiter/transport"
)

// NewNodeLink returns the link of the node named self to the node whose
// peer port is addr, with cfg. The batching client is made at once (it
// connects lazily).
func NewNodeLink(self, addr string, cfg PeerConfig) (*NodeLink, error) {
	c, err := NewPeerClient(addr, cfg)
	if err != nil {
		return nil, err
	}
	return &NodeLink{addr: addr, self: self, cfg: cfg, c: c}, nil
}

// NodeLink is what a node asks of one other node over its peer port: the
// Peers service for checks (a batching PeerClient, and a second one for
// the checks it decides as a stand-in), and the State service for key
// states, inspection, its ring and leases (a StateClient). The stand-in
// and state clients are made on first use. It is safe for concurrent use.
type NodeLink struct {
	addr, self string
	cfg        PeerConfig
	c          *PeerClient

	mu sync.Mutex
	// standin forwards the checks the peer decides as the stand-in of an
	// unreachable owner; st moves key states. Both are made on first use;
	// guarded by mu.
	standin *PeerClient
	st      *StateClient
	closed  bool // guarded by mu: make nothing more
}

// Forward has the node decide checks; with standin, as the stand-in of
// their unreachable owner.
func (l *NodeLink) Forward(ctx context.Context, checks []limit.Check, standin bool) ([]limit.Result, error) {
	c := l.c
	if standin {
		var err error
		if c, err = l.standinClient(); err != nil {
			return nil, err
		}
	}
	return c.Forward(ctx, checks)
}

func (l *NodeLink) standinClient() (*PeerClient, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil, transport.ErrClosed
	}
	if l.standin == nil {
		cfg := l.cfg
		cfg.Standin = true
		c, err := NewPeerClient(l.addr, cfg)
		if err != nil {
			return nil, err
		}
		l.standin = c
	}
	return l.standin, nil
}

// state returns the node's state client.
func (l *NodeLink) state() (*StateClient, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil, transport.ErrClosed
	}
	if l.st == nil {
		st, err := NewStateClient(l.addr, l.self, l.cfg)
		if err != nil {
			return nil, err
		}
		l.st = st
	}
	return l.st, nil
}

// Push sends key states to the node (StateClient.Push).
func (l *NodeLink) Push(ctx context.Context, why limit.Transfer, partitions []int, keys []limit.KeyState) error {
	st, err := l.state()
	if err != nil {
		return err
	}
	return st.Push(ctx, why, partitions, keys)
}

// Pull takes over the node's keys of partitions (StateClient.Pull).
func (l *NodeLink) Pull(ctx context.Context, r limit.PullRequest) ([]limit.KeyState, error) {
	st, err := l.state()
	if err != nil {
		return nil, err
	}
	return st.Pull(ctx, r)
}

// Inspect reads what the node holds of c's key (StateClient.Inspect).
func (l *NodeLink) Inspect(ctx context.Context, c limit.Check) (limit.KeyView, error) {
	st, err := l.state()
	if err != nil {
		return limit.KeyView{}, err
	}
	return st.Inspect(ctx, c)
}

// Ring asks the node for its ring (StateClient.Ring).
func (l *NodeLink) Ring(ctx context.Context) (transport.RingInfo, error) {
	st, err := l.state()
	if err != nil {
		return transport.RingInfo{}, err
	}
	return st.Ring(ctx)
}

// Lease asks the node, the key's owner, for a lease (StateClient.Lease).
func (l *NodeLink) Lease(ctx context.Context, r limit.LeaseRequest) (limit.LeaseGrant, error) {
	st, err := l.state()
	if err != nil {
		return limit.LeaseGrant{}, err
	}
	return st.Lease(ctx, r)
}

// Close closes the clients, each waiting for its RPCs in flight; later
// calls fail with transport.ErrClosed.
func (l *NodeLink) Close() error {
	l.mu.Lock()
	l.closed = true
	standin, st := l.standin, l.st
	l.mu.Unlock()
	err := l.c.Close()
	if standin != nil {
		standin.Close()
	}
	if st != nil {
		st.Close()
	}
	return err
}
