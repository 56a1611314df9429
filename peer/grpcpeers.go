package peer

import (
	"context"
	"sync"

	"github.com/shardlimiter/shardlimiter/limit"
	"github.com/shardlimiter/shardlimiter/transport"
	"github.com/shardlimiter/shardlimiter/transport/dial"
)

// The gRPC links: the peer port's Peers service for checks (a batching
// client, dial.PeerClient) and its State service for key states
// (dial.StateClient). This file is the only one of the package that
// knows those clients.

// grpcDialer dials peers over gRPC with cfg (Config.Peer).
type grpcDialer struct{ cfg dial.PeerConfig }

// Dial makes the batching client of addr at once (it connects lazily);
// the stand-in and state clients are made on first use.
func (d grpcDialer) Dial(self, addr string) (Link, error) {
	c, err := dial.NewPeerClient(addr, d.cfg)
	if err != nil {
		return nil, err
	}
	return &grpcLink{addr: addr, self: self, cfg: d.cfg, c: c}, nil
}

// grpcLink is the link to one peer over gRPC.
type grpcLink struct {
	addr, self string
	cfg        dial.PeerConfig
	c          *dial.PeerClient

	mu sync.Mutex
	// standin forwards the checks the peer decides as the stand-in of an
	// unreachable owner; st moves key states. Both are made on first use;
	// guarded by mu.
	standin *dial.PeerClient
	st      *dial.StateClient
	closed  bool // guarded by mu: make nothing more
}

func (l *grpcLink) Forward(ctx context.Context, checks []limit.Check, standin bool) ([]limit.Result, error) {
	c := l.c
	if standin {
		var err error
		if c, err = l.standinClient(); err != nil {
			return nil, err
		}
	}
	return c.Forward(ctx, checks)
}

func (l *grpcLink) standinClient() (*dial.PeerClient, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil, transport.ErrClosed
	}
	if l.standin == nil {
		cfg := l.cfg
		cfg.Standin = true
		c, err := dial.NewPeerClient(l.addr, cfg)
		if err != nil {
			return nil, err
		}
		l.standin = c
	}
	return l.standin, nil
}

// state returns the peer's state-transfer client.
func (l *grpcLink) state() (*dial.StateClient, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil, transport.ErrClosed
	}
	if l.st == nil {
		st, err := dial.NewStateClient(l.addr, l.self, l.cfg)
		if err != nil {
			return nil, err
		}
		l.st = st
	}
	return l.st, nil
}

func (l *grpcLink) Push(ctx context.Context, why limit.Transfer, partitions []int, keys []limit.KeyState) error {
	st, err := l.state()
	if err != nil {
		return err
	}
	return st.Push(ctx, why, partitions, keys)
}

func (l *grpcLink) Pull(ctx context.Context, members uint64, partitions []int) ([]limit.KeyState, error) {
	st, err := l.state()
	if err != nil {
		return nil, err
	}
	return st.Pull(ctx, members, partitions)
}

func (l *grpcLink) Inspect(ctx context.Context, c limit.Check) (limit.KeyView, error) {
	st, err := l.state()
	if err != nil {
		return limit.KeyView{}, err
	}
	return st.Inspect(ctx, c)
}

func (l *grpcLink) Ring(ctx context.Context) (transport.RingInfo, error) {
	st, err := l.state()
	if err != nil {
		return transport.RingInfo{}, err
	}
	return st.Ring(ctx)
}

func (l *grpcLink) Lease(ctx context.Context, r limit.LeaseRequest) (limit.LeaseGrant, error) {
	st, err := l.state()
	if err != nil {
		return limit.LeaseGrant{}, err
	}
	return st.Lease(ctx, r)
}

// Close closes the clients, each waiting for its RPCs in flight.
func (l *grpcLink) Close() error {
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
