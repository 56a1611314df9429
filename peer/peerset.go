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

// peerSet holds one Link per peer (links.go), keyed by node name (never by
// address alone: several nodes may share an IP). Links are made on first
// use and closed when their peer leaves the ring or changes address.
type peerSet struct {
	dial    Dialer
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
	closing  sync.WaitGroup         // links being closed off the lock
}

// peerClient is one peer's link and its suspension.
type peerClient struct {
	addr string
	link Link
	down *suspension
}

// errSuspended answers forwards to a suspended peer.
var errSuspended = fmt.Errorf("peer: owner suspended after a failed forward: %w", transport.ErrUnavailable)

// forward sends checks to owner through its link, unless owner is
// suspended after a recent failure. With standin, the receiver decides them
// as the stand-in of their unreachable owner.
func (s *peerSet) forward(ctx context.Context, owner ring.Member, checks []limit.Check, standin bool) ([]limit.Result, error) {
	pc, err := s.client(owner)
	if err != nil {
		return nil, err
	}
	if !pc.down.allow(s.now()) {
		return nil, errSuspended
	}
	sent := s.now()
	out, err := pc.link.Forward(ctx, checks, standin)
	switch {
	case err == nil:
		if pc.down.succeeded(sent) {
			s.log.Info("peer answers again", "peer", owner.Name, "addr", pc.addr)
		}
	case ctx.Err() == nil && (errors.Is(err, transport.ErrTimeout) || errors.Is(err, transport.ErrUnavailable)):
		// The time of the failure, not of the send. Logged once per outage:
		// the first failure after an answer (a refused TLS handshake shows
		// here, with the reason, on the forwarding side).
		if pc.down.failed(s.now(), sent) {
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

// link returns the link to m, for state transfers, inspection and rings
// (forwards go through forward, which minds the suspension).
func (s *peerSet) link(m ring.Member) (Link, error) {
	pc, err := s.client(m)
	if err != nil {
		return nil, err
	}
	return pc.link, nil
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
	link, err := s.dial.Dial(s.self, addr)
	if err != nil {
		return nil, err
	}
	if old := s.clients[m.Name]; old != nil {
		s.closeLocked(old)
	}
	if s.clients == nil {
		s.clients = make(map[string]*peerClient)
	}
	pc := &peerClient{addr: addr, link: link, down: newSuspension(s.backoff)}
	s.clients[m.Name] = pc
	return pc, nil
}

// retain closes the links of peers that are not in members (by name and
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

// resume lifts every peer's forwarding suspension. A ring that gains a
// member is what the end of a partition looks like: the peers that were
// cut off with it answer again, but a suspension (up to 10 × PeerBackoff)
// would keep their checks, and the pulls from them, on the stand-in or the
// fail policy, counted as fallbacks, for up to 1 s after the heal. A peer
// still unreachable costs one forward's timeout before it is suspended
// again.
func (s *peerSet) resume() {
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, pc := range s.clients {
		pc.down.lift(now)
	}
}

// closeLocked closes pc's link off the lock: Close waits for the link's
// calls in flight, and nothing slow may run under s.mu.
func (s *peerSet) closeLocked(pc *peerClient) {
	s.closing.Go(func() { pc.link.Close() })
}

// closeAll closes every link and waits until all are closed. Later
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
