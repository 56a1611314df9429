package peer

import (
	"testing"
	"time"

	"github.com/shardlimiter/shardlimiter/internal/poll"
	"github.com/shardlimiter/shardlimiter/ring"
)

// TestSuspensionSteps walks one peer's back-off through named instants:
// suspended after a failure, probed when it ends, doubling while probes
// fail, capped at maxBackoffFactor × first, reset by a success; a failure
// of a forward sent before the last answered one changes nothing.
func TestSuspensionSteps(t *testing.T) {
	const ms = int64(time.Millisecond)
	s := newSuspension(100 * time.Millisecond)
	type step struct {
		name string
		at   int64  // ms
		do   string // "failed", "succeeded" or "" (only check allow)
		sent int64  // ms: the forward's send; at when 0
		want bool   // allow(at) after do
	}
	steps := []step{
		{"fresh peer", 0, "", 0, true},
		{"first failure suspends for 100ms", 1000, "failed", 0, false},
		{"still suspended just before the end", 1099, "", 0, false},
		{"probe allowed at the end", 1100, "", 0, true},
		{"probe fails: 200ms", 1100, "failed", 0, false},
		{"still suspended at 1299", 1299, "", 0, false},
		{"probe allowed at 1300", 1300, "", 0, true},
		{"probe fails: 400ms", 1300, "failed", 0, false},
		{"allowed at 1700", 1700, "", 0, true},
		{"fails: 800ms", 1700, "failed", 0, false},
		{"allowed at 2500", 2500, "", 0, true},
		{"fails: capped at 1000ms, not 1600ms", 2500, "failed", 0, false},
		{"suspended at 3499", 3499, "", 0, false},
		{"allowed at 3500", 3500, "", 0, true},
		{"fails again: still 1000ms", 3500, "failed", 0, false},
		{"allowed at 4500", 4500, "", 0, true},
		{"probe answered", 4500, "succeeded", 0, true},
		{"next failure starts at 100ms again", 5000, "failed", 0, false},
		{"allowed at 5100", 5100, "", 0, true},
		{"a forward sent at 5150 answered at 5200", 5200, "succeeded", 5150, true},
		{"one sent at 5100 fails at 5300: older than the answer, ignored", 5300, "failed", 5100, true},
		{"one sent at 5200 fails at 5300: 100ms", 5300, "failed", 5200, false},
	}
	for _, st := range steps {
		sent := st.sent
		if sent == 0 {
			sent = st.at
		}
		switch st.do {
		case "failed":
			s.failed(st.at*ms, sent*ms)
		case "succeeded":
			s.succeeded(sent * ms)
		}
		if got := s.allow(st.at * ms); got != st.want {
			t.Fatalf("%s: allow(%dms) = %v, want %v", st.name, st.at, got, st.want)
		}
	}
}

// TestSuspensionLift: lift ends a suspension at once and resets the
// back-off, as an answer would.
func TestSuspensionLift(t *testing.T) {
	const ms = int64(time.Millisecond)
	s := newSuspension(100 * time.Millisecond)
	for _, at := range []int64{0, 100, 300, 700} {
		s.failed(at*ms, at*ms) // 100, 200, 400, 800 ms
	}
	if s.allow(800 * ms) {
		t.Fatal("allow(800ms) after four failures = true, want suspended until 1500ms")
	}
	s.lift(800 * ms)
	if !s.allow(800 * ms) {
		t.Fatal("allow(800ms) after lift = false, want true")
	}
	s.failed(850*ms, 750*ms) // sent before the lift: ignored
	if !s.allow(850 * ms) {
		t.Fatal("a forward sent before the lift suspended the peer again")
	}
	s.failed(900*ms, 900*ms)
	if s.allow(999*ms) || !s.allow(1000*ms) {
		t.Errorf("after lift, the next failure suspends for %v, want 100ms again", time.Duration(s.backoff.Load()))
	}
}

// TestRingGainLiftsSuspensions: a peer suspended after failed forwards is
// forwarded to again as soon as the ring gains a member (what the end of a
// partition looks like), not when its back-off ends; a ring that only
// loses a member leaves the suspension as it is.
func TestRingGainLiftsSuspensions(t *testing.T) {
	t.Parallel()
	c := newMemCluster(t, 3, Config{PeerBackoff: time.Hour})
	nodes := c.running()
	entry, peer := nodes[0], nodes[1]
	m := ring.Member{Name: peer.name, Addr: peer.addr}
	suspend := func() {
		pc, err := entry.node.peers.client(m)
		if err != nil {
			t.Fatal(err)
		}
		now := entry.node.peers.now()
		pc.down.failed(now, now)
		if entry.node.peers.allowed(m) {
			t.Fatal("a peer that just failed is allowed")
		}
	}
	suspend()
	c.crash(nodes[2])
	c.signal()
	c.waitConverged()
	if entry.node.peers.allowed(m) {
		t.Error("a ring that lost a member lifted the suspension of another")
	}
	c.add()
	// The ring is stored before the rebuild lifts the suspensions.
	poll.Until(t, 5*time.Second, func() bool { return entry.node.peers.allowed(m) },
		"a ring that gained a member lifts a peer's suspension (of an hour)")
}
