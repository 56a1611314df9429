package sim

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/shardlimiter/shardlimiter/limit"
	"github.com/shardlimiter/shardlimiter/peer"
)

// PeerNet is a peer.Dialer over a peer.MemNet that counts what the nodes
// send each other: forwards (messages and checks), and key states moved
// by handoff and replication (keys and the bytes a push or pull would
// carry: key and state, as transport/wire encodes them, without framing).
type PeerNet struct {
	*peer.MemNet

	forwards, forwarded atomic.Int64 // Forward calls, checks in them
	mu                  sync.Mutex
	replica, handoff    Moved
	lastHandoff         time.Time // end of the last handoff push or pull
}

// Moved counts key states sent for one kind of transfer.
type Moved struct {
	Calls, Keys, Bytes int64
}

// NewPeerNet returns a PeerNet over a new MemNet.
func NewPeerNet() *PeerNet { return &PeerNet{MemNet: peer.NewMemNet()} }

// Dial implements peer.Dialer.
func (p *PeerNet) Dial(self, addr string) (peer.Link, error) {
	l, err := p.MemNet.Dial(self, addr)
	if err != nil {
		return nil, err
	}
	return &countedLink{Link: l, net: p}, nil
}

// Forwards returns the Forward calls made so far and the checks they
// carried.
func (p *PeerNet) Forwards() (calls, checks int64) { return p.forwards.Load(), p.forwarded.Load() }

// Moved returns what was moved so far by replication and by handoff
// (pushes of a join or leave, and pulls: of a join, from a leaving node,
// or of a crashed node's replica).
func (p *PeerNet) Moved() (replica, handoff Moved) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.replica, p.handoff
}

// LastHandoff is when the last handoff push or pull returned.
func (p *PeerNet) LastHandoff() time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.lastHandoff
}

func (p *PeerNet) count(why limit.Transfer, keys []limit.KeyState) {
	var b int64
	for _, k := range keys {
		b += int64(len(k.Key) + len(k.State))
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	m := &p.handoff
	if why == limit.Replica {
		m = &p.replica
	}
	m.Calls++
	m.Keys += int64(len(keys))
	m.Bytes += b
	if why != limit.Replica {
		p.lastHandoff = time.Now()
	}
}

// countedLink counts a link's calls on its PeerNet.
type countedLink struct {
	peer.Link
	net *PeerNet
}

func (l *countedLink) Forward(ctx context.Context, checks []limit.Check, standin bool) ([]limit.Result, error) {
	l.net.forwards.Add(1)
	l.net.forwarded.Add(int64(len(checks)))
	return l.Link.Forward(ctx, checks, standin)
}

func (l *countedLink) Push(ctx context.Context, why limit.Transfer, partitions []int, keys []limit.KeyState) error {
	err := l.Link.Push(ctx, why, partitions, keys)
	if err == nil {
		l.net.count(why, keys)
	}
	return err
}

func (l *countedLink) Pull(ctx context.Context, r limit.PullRequest) ([]limit.KeyState, error) {
	keys, err := l.Link.Pull(ctx, r)
	if err == nil {
		l.net.count(limit.Join, keys)
	}
	return keys, err
}
