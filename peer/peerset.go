package peer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/shardlimiter/shardlimiter/limit"
	"github.com/shardlimiter/shardlimiter/ring"
	"github.com/shardlimiter/shardlimiter/transport"
)

// peerSet holds one batching client per peer, keyed by node name (never by
// address alone: several nodes may share an IP). Clients are created on
// first use and closed when their peer leaves the ring or changes address.
type peerSet struct {
	cfg     transport.PeerConfig
	self    string        // this node's name, sent with state transfers
	backoff time.Duration // first suspension after a failed forward
	now     func() int64  // the suspensions' clock, Unix ns
	log     *slog.Logger
	// standins: replication is on, so the checks of a peer that cannot be
	// reached go to its stand-in (Node.standIn) before the fail policy.
	standins bool
	mu       sync.Mutex
	clients  map[string]*peerClient // guarded by mu
	closed   bool                   // guarded by mu
	closing  sync.WaitGroup         // clients being closed off the lock
}

type peerClient struct {
	addr string
	c    *transport.PeerClient
	down *suspension
	// standin forwards checks this peer decides as the stand-in of an
	// unreachable owner; st moves key states. Both are made on first use,
	// under peerSet.mu.
	standin *transport.PeerClient
	st      *transport.StateClient
	gone    bool // closed: make nothing more for it; guarded by peerSet.mu
}

// errSuspended answers forwards to a suspended peer.
var errSuspended = fmt.Errorf("peer: owner suspended after a failed forward: %w", transport.ErrUnavailable)

// forward sends checks to owner through its client, unless owner is
// suspended after a recent failure. With standin, the receiver decides them
// as the stand-in of their unreachable owner (transport.IsStandin).
func (s *peerSet) forward(ctx context.Context, owner ring.Member, checks []limit.Check, standin bool) ([]limit.Result, error) {
	pc, err := s.client(owner)
	if err != nil {
		return nil, err
	}
	if !pc.down.allow(s.now()) {
		return nil, errSuspended
	}
	c := pc.c
	if standin {
		if c, err = s.standinClient(pc); err != nil {
			return nil, err
		}
	}
	out, err := c.Forward(ctx, checks)
	switch {
	case err == nil:
		if pc.down.succeeded() {
			s.log.Info("peer answers again", "peer", owner.Name, "addr", pc.addr)
		}
	case ctx.Err() == nil && (errors.Is(err, transport.ErrTimeout) || errors.Is(err, transport.ErrUnavailable)):
		// The time of the failure, not of the send. Logged once per outage:
		// the first failure after an answer (a refused TLS handshake shows
		// here, with the reason, on the forwarding side).
		if pc.down.failed(s.now()) {
			s.log.Warn(s.suspendedMsg(standin), "peer", owner.Name, "addr", pc.addr, "err", err)
		}
	}
	return out, err
}

// suspendedMsg is the line logged when a peer is suspended after a failed
// forward: it says where that peer's checks go meanwhile, as Node.forward
// routes them. With replication on, the checks it owns go to its stand-in
// (the holder of its replicas), and the fail policy decides only those no
// stand-in can take: the checks it was itself asked to stand in for, and
// any whose stand-in is unreachable too.
func (s *peerSet) suspendedMsg(standin bool) string {
	switch {
	case standin:
		return "forward to stand-in failed; the checks it stands in for follow the fail policy while it is suspended"
	case s.standins:
		return "forward to peer failed; its checks go to its stand-in (the holder of its replicas) while it is suspended"
	default:
		return "forward to peer failed; its checks follow the fail policy while it is suspended (replication is off: no stand-in)"
	}
}

// allowed reports whether m is not suspended.
func (s *peerSet) allowed(m ring.Member) bool {
	s.mu.Lock()
	pc := s.clients[m.Name]
	s.mu.Unlock()
	return pc == nil || pc.addr != peerAddr(m) || pc.down.allow(s.now())
}

func (s *peerSet) standinClient(pc *peerClient) (*transport.PeerClient, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || pc.gone {
		return nil, transport.ErrClosed
	}
	if pc.standin == nil {
		cfg := s.cfg
		cfg.Standin = true
		c, err := transport.NewPeerClient(pc.addr, cfg)
		if err != nil {
			return nil, err
		}
		pc.standin = c
	}
	return pc.standin, nil
}

// state returns the state-transfer client of m.
func (s *peerSet) state(m ring.Member) (*transport.StateClient, error) {
	pc, err := s.client(m)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || pc.gone {
		return nil, transport.ErrClosed
	}
	if pc.st == nil {
		if pc.st, err = transport.NewStateClient(pc.addr, s.self, s.cfg); err != nil {
			return nil, err
		}
	}
	return pc.st, nil
}

func (s *peerSet) client(m ring.Member) (*peerClient, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, transport.ErrClosed
	}
	addr := peerAddr(m)
	if pc := s.clients[m.Name]; pc != nil && pc.addr == addr {
		return pc, nil
	}
	c, err := transport.NewPeerClient(addr, s.cfg)
	if err != nil {
		return nil, err
	}
	if old := s.clients[m.Name]; old != nil {
		s.closeLocked(old)
	}
	if s.clients == nil {
		s.clients = make(map[string]*peerClient)
	}
	pc := &peerClient{addr: addr, c: c, down: newSuspension(s.backoff)}
	s.clients[m.Name] = pc
	return pc, nil
}

// retain closes the clients of peers that are not in members (by name and
// address).
func (s *peerSet) retain(members []ring.Member) {
	keep := make(map[string]string, len(members))
	for _, m := range members {
		keep[m.Name] = peerAddr(m)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for name, pc := range s.clients {
		if addr, ok := keep[name]; !ok || addr != pc.addr {
			delete(s.clients, name)
			s.closeLocked(pc)
		}
	}
}

// closeLocked closes pc off the lock: Close waits for the client's RPCs in
// flight, and nothing slow may run under s.mu.
func (s *peerSet) closeLocked(pc *peerClient) {
	pc.gone = true
	standin, st := pc.standin, pc.st
	s.closing.Go(func() {
		pc.c.Close()
		if standin != nil {
			standin.Close()
		}
		if st != nil {
			st.Close()
		}
	})
}

// closeAll closes every client and waits until all are closed. Later
// forwards fail with transport.ErrClosed (and the fail policy answers).
func (s *peerSet) closeAll() {
	s.mu.Lock()
	s.closed = true
	for name, pc := range s.clients {
		delete(s.clients, name)
		s.closeLocked(pc)
	}
	s.mu.Unlock()
	s.closing.Wait()
}
