package gossip

import (
	"context"
	"net"
	"slices"
	"sync"
	"time"

	"github.com/hashicorp/memberlist"
)

// Healing partitions.
//
// memberlist talks to a member it has declared dead only to pass on news:
// for GossipToTheDeadTime (30 s) after the verdict its gossip rounds may
// pick the dead member, but a round sends only queued broadcasts, and
// those are spent (each is sent a few times) within a second or two of the
// verdict. It never probes a dead member, and push/pull picks alive ones
// only. So once both sides of a partition have declared each other dead
// and the news is spent, nothing crosses when the network heals: the halves
// stay apart until a seed rejoin (RejoinInterval) or a join by hand. A
// longer GossipToTheDeadTime would not help: with nothing queued there is
// nothing to send.
//
// So this node looks for the members that failure detection declared dead
// (not those that left): each is pinged over UDP (memberlist's Ping, one
// packet and its ack, ProbeTimeout to answer) 250 ms after the verdict,
// then after twice the pause, up to HealInterval (1 s), for as long as it
// stays dead, up to healFor. The first answer means the path is back: a
// join (a full state exchange over TCP) with that member follows at once.
// The exchange tells each side that the other had declared it dead; each
// refutes with a higher incarnation, and its alive message spreads on the
// next probes and gossip rounds. The join itself is made only on an
// answer, so an unreachable member costs one small packet per HealInterval,
// never a TCP connect held for the 3 s TCPTimeout.
//
// Cost: nothing while every member is alive (no timer runs); one ping
// (two UDP packets of ~60 bytes) per dead member per HealInterval, and
// one wake-up of this goroutine per round, all dead members pinged at once.
// A node may have many dead members after crashes that no one replaced
// under the same name; at most maxDead, the latest, are looked for, and
// none longer than healFor.

const (
	// healFirst is the pause before the first ping of a member just
	// declared dead; it doubles at each miss up to HealInterval.
	healFirst = 250 * time.Millisecond
	// healFor is how long a dead member is looked for. A partition that
	// lasts longer heals through RejoinInterval.
	healFor = 24 * time.Hour
	// maxDead bounds the dead members looked for; the earliest dead are
	// dropped first.
	maxDead = 64
)

// deadMember is a member declared dead by failure detection, looked for by
// healLoop.
type deadMember struct {
	name  string
	addr  string // gossip ip:port
	since time.Time
	next  time.Time     // next ping
	pause time.Duration // after the next ping, if it fails
}

// pingFunc pings the member name at addr (ip:port) and reports whether it
// answered. healLoop takes it as a parameter so that its schedule can be
// tested without a network.
type pingFunc func(name, addr string) bool

// ping is the pingFunc of a running memberlist.
func ping(ml *memberlist.Memberlist) pingFunc {
	return func(name, addr string) bool {
		ua, err := net.ResolveUDPAddr("udp", addr) // an ip:port literal: no lookup
		if err != nil {
			return false
		}
		_, err = ml.Ping(name, ua)
		return err == nil
	}
}

// markDeadLocked records that member n is gone, unless it said it was
// leaving (a notice, see below); called from NotifyLeave with
// Membership.mu held.
func (m *Membership) markDeadLocked(n *memberlist.Node, now time.Time) {
	if _, left := m.leftAt[n.Name]; left || n.Name == m.cfg.NodeName || m.cfg.HealInterval < 0 {
		delete(m.dead, n.Name)
		return
	}
	m.dead[n.Name] = &deadMember{name: n.Name, addr: n.Address(), since: now, next: now.Add(healFirst), pause: min(2*healFirst, m.cfg.HealInterval)}
	if len(m.dead) > maxDead {
		var first *deadMember
		for _, d := range m.dead {
			if first == nil || d.since.Before(first.since) {
				first = d
			}
		}
		delete(m.dead, first.name)
	}
	m.signal(m.deadWake)
}

// aliveLocked forgets what member n, alive, ends: its dead entry and
// leave notice, and the dead entry of any other member at its address (a
// new node took it). Membership.mu held.
func (m *Membership) aliveLocked(n *memberlist.Node) {
	delete(m.dead, n.Name)
	delete(m.leftAt, n.Name)
	addr := n.Address()
	for name, d := range m.dead {
		if d.addr == addr {
			delete(m.dead, name)
		}
	}
}

// Leave notices. memberlist spreads a graceful leave, but its NotifyLeave
// does not say whether a member left or was declared dead (it keeps that
// in its own node state, not in the Node it passes), and a member that
// left will not answer again: looking for it would cost a ping a second
// for a day after every rolling restart. So a leaving node also gossips a
// notice of its own (leftMsg and its name) beside memberlist's, each node
// relays the notice once when it first hears it, as memberlist relays its
// own messages, and a member named in a notice is not looked for. A node
// of an older version sends none: its leave costs those pings.

// leftMsg starts a leave notice; the node's name follows.
const leftMsg byte = 'L'

// retransmitMult is memberlist's RetransmitMult in the LAN profile: a
// notice is sent 4 × log10(n+1) times (rounded up) by each node that
// relays it.
const retransmitMult = 4

// leftMemory is how long a notice is kept: it may come before or after
// memberlist's news of the same leave.
const leftMemory = time.Minute

// leftNotice is a leave notice in the broadcast queue.
type leftNotice struct {
	name string
	msg  []byte
}

func newLeftNotice(name string) *leftNotice {
	return &leftNotice{name: name, msg: append([]byte{leftMsg}, name...)}
}

func (b *leftNotice) Invalidates(o memberlist.Broadcast) bool {
	other, ok := o.(*leftNotice)
	return ok && other.name == b.name
}
func (b *leftNotice) Message() []byte { return b.msg }
func (b *leftNotice) Finished()       {}

// noticeReceived handles a user message of memberlist: a leave notice
// ends the search for its member and is relayed on first sight. Others
// are ignored.
func (m *Membership) noticeReceived(msg []byte) {
	if len(msg) < 2 || msg[0] != leftMsg {
		return
	}
	name := string(msg[1:]) // a copy: msg is memberlist's buffer
	if name == m.cfg.NodeName {
		return
	}
	now := time.Now()
	m.mu.Lock()
	_, seen := m.leftAt[name]
	m.leftAt[name] = now
	delete(m.dead, name)
	for n, at := range m.leftAt {
		if now.Sub(at) > leftMemory {
			delete(m.leftAt, n)
		}
	}
	m.mu.Unlock()
	if !seen {
		m.notices.QueueBroadcast(newLeftNotice(name))
	}
}

// deadNames returns the names of the members this node looks for after
// failure detection declared them dead, sorted.
func (m *Membership) deadNames() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]string, 0, len(m.dead))
	for name := range m.dead {
		out = append(out, name)
	}
	slices.Sort(out)
	return out
}

// due returns the dead members to ping at now, moving each one's
// next ping on, and the pause until the next one is due (0: none is
// tracked). Entries older than healFor are dropped.
func (m *Membership) due(now time.Time) (due []deadMember, wait time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for name, d := range m.dead {
		if now.Sub(d.since) > healFor {
			delete(m.dead, name)
			continue
		}
		if !now.Before(d.next) {
			due = append(due, *d)
			d.next = now.Add(jitter(d.pause))
			d.pause = min(2*d.pause, m.cfg.HealInterval)
		}
		if w := d.next.Sub(now); wait == 0 || w < wait {
			wait = max(w, time.Millisecond)
		}
	}
	return due, wait
}

// healLoop looks for the dead members until ctx is done (see the comment
// at the top of this file); a node that is leaving looks for no one.
func (m *Membership) healLoop(ctx context.Context, ping pingFunc, contact contactFunc) {
	t := time.NewTimer(time.Hour)
	t.Stop()
	defer t.Stop()
	for {
		due, wait := m.due(time.Now())
		if len(due) > 0 && !m.leaving.Load() {
			m.healRound(ctx, due, ping, contact)
			continue // the round took time: look again
		}
		var timer <-chan time.Time
		if wait > 0 {
			t.Reset(wait)
			timer = t.C
		}
		select {
		case <-ctx.Done():
			return
		case <-m.deadWake:
			t.Stop()
		case <-timer:
		}
	}
}

// healRound pings the due members at once and joins those that answer.
func (m *Membership) healRound(ctx context.Context, due []deadMember, ping pingFunc, contact contactFunc) {
	answered := make([]bool, len(due))
	var wg sync.WaitGroup
	for i, d := range due {
		wg.Go(func() { answered[i] = ping(d.name, d.addr) })
	}
	wg.Wait()
	for i, d := range due {
		if !answered[i] || ctx.Err() != nil {
			continue
		}
		ok, _, err := contact(ctx, []string{d.addr})
		if ok > 0 {
			m.log.Info("a member declared dead answers again; joined it", "member", d.name, "addr", d.addr, "dead_for", time.Since(d.since).Round(time.Millisecond))
		} else {
			m.log.Debug("a member declared dead answers a ping but its join failed", "member", d.name, "addr", d.addr, "err", err)
		}
	}
}
