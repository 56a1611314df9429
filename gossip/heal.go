package gossip

import (
	"context"
	"slices"
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
// (not those that left): it knocks on each, a UDP user message of a few
// dozen bytes with its own name (knockMsg), 250 ms after the verdict, then
// after twice the pause, up to HealInterval (1 s), for as long as it stays
// dead, up to healFor. A knock that arrives means the path is back: the
// node knocked on joins the knocker at once (a full state exchange over
// TCP), at the address it holds for it, never at one the message names.
// The exchange tells each side that the other had declared it dead; each
// refutes with a higher incarnation, and its alive message spreads on the
// next probes and gossip rounds. Both sides of a partition knock, so
// whichever hears first joins. A node knocked on by a member it holds
// alive joins it too: the knocker holds it dead, and would not hear
// otherwise (half-merged views, when stale news crossed the heal).
//
// A knock is fire and forget: no ack to wait for, no timer per knock, so
// an unreachable member costs one small packet per HealInterval, never a
// TCP connect held for the 3 s TCPTimeout nor the timers of memberlist's
// Ping (which made it cost three wake-ups a second: +20-25 ms of CPU per
// 20 s per dead member, measured).
//
// Cost: nothing while every member is alive (no timer runs); per
// HealInterval, one wake-up of this goroutine and one packet per dead
// member, all sent in that wake-up. A node may have many dead members
// after crashes that no one replaced under the same name; at most maxDead,
// the latest, are looked for, and none longer than healFor.

const (
	// healFirst is the pause before the first knock on a member just
	// declared dead; it doubles up to HealInterval.
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
	name    string
	addr    string // gossip ip:port
	since   time.Time
	next    time.Time     // next knock
	pause   time.Duration // after the next knock
	knocked bool          // it knocked here: join it
}

// knockMsg starts a knock; the knocker's name follows.
const knockMsg byte = 'K'

// knockFunc knocks on the member name at addr (ip:port). healLoop takes it
// as a parameter so that its schedule can be tested without a network.
type knockFunc func(name, addr string)

// knock is the knockFunc of a running memberlist. A send error (a route
// gone) is what a dropped packet would be: the next round tries again.
func knock(ml *memberlist.Memberlist, self string) knockFunc {
	msg := append([]byte{knockMsg}, self...)
	return func(name, addr string) {
		_ = ml.SendToAddress(memberlist.Address{Addr: addr, Name: name}, msg)
	}
}

// knocked handles a knock from the member name: a member held dead, or
// alive, is joined by the next round; a name this node does not know is
// ignored (a knock cannot make it join an address of the sender's choice),
// and so is every knock when the search is off (HealInterval < 0).
func (m *Membership) knocked(name string) {
	if m.cfg.HealInterval < 0 {
		return
	}
	m.mu.Lock()
	if d := m.dead[name]; d != nil {
		d.knocked = true
	} else if mb := m.members[name]; mb != nil && name != m.cfg.NodeName {
		m.answer[name] = mb.gossip
	} else {
		m.mu.Unlock()
		return
	}
	m.mu.Unlock()
	m.signal(m.deadWake)
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
// left will not answer again: looking for it would cost a knock a second
// for a day after every rolling restart. So a leaving node also gossips a
// notice of its own (leftMsg and its name) beside memberlist's, each node
// relays the notice once when it first hears it, as memberlist relays its
// own messages, and a member named in a notice is not looked for. A node
// of an older version sends none: its leave costs those knocks.

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

// noticeReceived handles a user message of memberlist: a knock (see
// knocked), or a leave notice, which ends the search for its member and is
// relayed on first sight. Others are ignored.
func (m *Membership) noticeReceived(msg []byte) {
	if len(msg) < 2 {
		return
	}
	name := string(msg[1:]) // a copy: msg is memberlist's buffer
	if name == m.cfg.NodeName {
		return
	}
	switch msg[0] {
	case knockMsg:
		m.knocked(name)
		return
	case leftMsg:
	default:
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

// due returns the members to knock on at now, moving each one's next
// knock on, the members to join (they knocked here), and the pause until
// the next knock (0: no member is looked for). Entries older than healFor
// are dropped.
func (m *Membership) due(now time.Time) (knock, join []deadMember, wait time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for name, d := range m.dead {
		if now.Sub(d.since) > healFor {
			delete(m.dead, name)
			continue
		}
		if d.knocked {
			d.knocked = false
			join = append(join, *d)
		}
		if !now.Before(d.next) {
			knock = append(knock, *d)
			d.next = now.Add(jitter(d.pause))
			d.pause = min(2*d.pause, m.cfg.HealInterval)
		}
		if w := d.next.Sub(now); wait == 0 || w < wait {
			wait = max(w, time.Millisecond)
		}
	}
	for name, addr := range m.answer {
		join = append(join, deadMember{name: name, addr: addr})
		delete(m.answer, name)
	}
	return knock, join, wait
}

// healLoop looks for the dead members until ctx is done (see the comment
// at the top of this file); a node that is leaving looks for no one.
func (m *Membership) healLoop(ctx context.Context, knock knockFunc, contact contactFunc) {
	t := time.NewTimer(time.Hour)
	t.Stop()
	defer t.Stop()
	for {
		knocks, joins, wait := m.due(time.Now())
		if !m.leaving.Load() {
			for _, d := range knocks {
				knock(d.name, d.addr)
			}
			m.join(ctx, joins, contact)
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

// join joins the members that knocked here, one at a time. A member this
// node still suspects after the exchange is joined again, up to
// suspectRejoins times: the exchange told it that it is suspected here,
// and it refuted while merging our state, after its answer had gone out
// with its old incarnation; the next exchange brings the refutation. Left
// to gossip, the refutation came too late on the side that had been cut
// off alone (seen: its unconfirmed suspicion timed out 150 ms after it
// joined the knocker, 0.65 s after the heal, and it dropped the member
// from its ring until the member knocked again, 0.25 s later).
func (m *Membership) join(ctx context.Context, members []deadMember, contact contactFunc) {
	for _, d := range members {
		if ctx.Err() != nil {
			return
		}
		ok, _, err := contact(ctx, []string{d.addr})
		for i := 0; ok > 0 && i < suspectRejoins && m.suspects(d.name) && ctx.Err() == nil; i++ {
			contact(ctx, []string{d.addr})
		}
		switch {
		case ok > 0 && !d.since.IsZero():
			m.log.Info("a member declared dead knocked; joined it", "member", d.name, "addr", d.addr, "dead_for", time.Since(d.since).Round(time.Millisecond))
		case ok > 0:
			m.log.Info("a member that holds this node dead knocked; joined it", "member", d.name, "addr", d.addr)
		default:
			m.log.Debug("a member knocked but its join failed", "member", d.name, "addr", d.addr, "err", err)
		}
	}
}

// suspectRejoins bounds the exchanges join repeats with a member still
// suspected here.
const suspectRejoins = 2

// suspects reports whether memberlist holds the member name suspect.
func (m *Membership) suspects(name string) bool {
	ml := m.ml.Load()
	if ml == nil {
		return false
	}
	for _, n := range ml.Members() {
		if n.Name == name {
			return n.State == memberlist.StateSuspect
		}
	}
	return false
}
