package gossip

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/shardlimiter/shardlimiter/internal/poll"
)

// lanSwitch is the network between a test's nodes, on loopback: it can
// isolate some nodes from the others, dropping what crosses in either
// direction (the packets vanish; a connection is refused), as a partition
// does. Nodes on the same side still reach each other.
type lanSwitch struct {
	mu       sync.Mutex
	isolated map[string]bool // gossip address → cut off
}

func (s *lanSwitch) cut(addrs ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.isolated = map[string]bool{}
	for _, a := range addrs {
		s.isolated[a] = true
	}
}

func (s *lanSwitch) heal() { s.cut() }

// apart reports whether a packet from one address to another is dropped.
func (s *lanSwitch) apart(from, to string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.isolated[from] != s.isolated[to]
}

// switchedTransport is the node's socket transport behind a lanSwitch.
// What it sends to an address the switch separates from self is dropped.
type switchedTransport struct {
	*socketTransport
	sw   *lanSwitch
	self string
}

var errCut = errors.New("test: the switch drops this connection")

func (t *switchedTransport) WriteTo(b []byte, addr string) (time.Time, error) {
	if t.sw.apart(t.self, addr) {
		return time.Now(), nil
	}
	return t.socketTransport.WriteTo(b, addr)
}

func (t *switchedTransport) WriteToAddress(b []byte, a memberlist.Address) (time.Time, error) {
	if t.sw.apart(t.self, a.Addr) {
		return time.Now(), nil
	}
	return t.socketTransport.WriteToAddress(b, a)
}

func (t *switchedTransport) DialTimeout(addr string, timeout time.Duration) (net.Conn, error) {
	if t.sw.apart(t.self, addr) {
		return nil, errCut
	}
	return t.socketTransport.DialTimeout(addr, timeout)
}

func (t *switchedTransport) DialAddressTimeout(a memberlist.Address, timeout time.Duration) (net.Conn, error) {
	if t.sw.apart(t.self, a.Addr) {
		return nil, errCut
	}
	return t.socketTransport.DialAddressTimeout(a, timeout)
}

// on puts m's gossip behind sw: memberlist gets a switchedTransport on
// 127.0.0.1 and a port of its own.
func (sw *lanSwitch) on(m *Membership) {
	m.testTransport = func(c *memberlist.Config) (memberlist.Transport, error) {
		st, err := listenSockets(c.BindAddr, c.BindPort, c.Logger)
		if err != nil {
			return nil, err
		}
		c.BindPort = st.port()
		c.AdvertisePort = c.BindPort
		self := net.JoinHostPort(c.BindAddr, fmt.Sprint(c.BindPort))
		return &switchedTransport{socketTransport: st, sw: sw, self: self}, nil
	}
}

// switchedCluster starts three nodes a, b, c behind one switch, b and c
// seeded with a, and waits until they see each other.
func switchedCluster(t *testing.T, cfg Config) (*lanSwitch, []*gossipNode) {
	t.Helper()
	sw := &lanSwitch{}
	var nodes []*gossipNode
	for i := range 3 {
		c := cfg
		if i > 0 {
			c.Seeds = []string{nodes[0].m.LocalAddr()}
		}
		nodes = append(nodes, startGossipWith(t, fmt.Sprintf("node-%c", 'a'+i), "127.0.0.1:0", c, sw.on))
	}
	poll.Until(t, 10*time.Second, sees(nodes, membersOf(nodes...)), "three nodes converge")
	return sw, nodes
}

// TestHealedPartitionMerges cuts node c off from a and b until each side
// has declared the other dead, then heals the cut: the three must be one
// cluster again within healBound, by healLoop alone (the seed rejoin is
// off). Without it nothing would cross after the heal: memberlist sends a
// dead member nothing once the news of its death is spent, and its
// push/pull picks alive members only (heal.go). Twice, so that the second
// partition starts from a merged one.
func TestHealedPartitionMerges(t *testing.T) {
	t.Parallel()
	sw, nodes := switchedCluster(t, Config{RejoinInterval: -1})
	a, b, c := nodes[0], nodes[1], nodes[2]
	for round := range 2 {
		sw.cut(c.m.LocalAddr())
		poll.Until(t, 15*time.Second, func() bool {
			return sees([]*gossipNode{a, b}, membersOf(a, b))() && sees([]*gossipNode{c}, membersOf(c))()
		}, "round %d: each side declares the other dead", round)
		// Each side looks for the other.
		if got := c.m.deadNames(); !slices.Equal(got, []string{a.name, b.name}) {
			t.Errorf("round %d: %s looks for %v, want %v", round, c.name, got, []string{a.name, b.name})
		}
		if got := a.m.deadNames(); !slices.Equal(got, []string{c.name}) {
			t.Errorf("round %d: %s looks for %v, want [%s]", round, a.name, got, c.name)
		}
		refuted := c.m.DeathsRefuted()
		sw.heal()
		took := poll.Until(t, 10*time.Second, sees(nodes, membersOf(nodes...)), "round %d: one cluster again after the heal", round)
		// The cut-off node learns that the others held it dead: the
		// sign a node's ring user needs (DeathsRefuted) comes from
		// memberlist's log line, pinned here against the library.
		poll.Until(t, 5*time.Second, func() bool { return c.m.DeathsRefuted() > refuted }, "round %d: %s refutes its death", round, c.name)
		t.Logf("round %d: one cluster again %v after the heal", round, took.Round(10*time.Millisecond))
		if took > healBound {
			t.Errorf("round %d: one cluster again %v after the heal, want ≤ %v", round, took.Round(10*time.Millisecond), healBound)
		}
		for _, g := range nodes {
			if got := g.m.deadNames(); len(got) != 0 {
				t.Errorf("round %d: %s still looks for %v after the merge", round, g.name, got)
			}
		}
	}
}

// healBound is how soon after a partition heals its halves must be one
// cluster again: healLoop knocks within HealInterval (1 s) and the join and
// the refutations take a few gossip rounds.
const healBound = 3 * time.Second

// TestLeftMembersAreNotLookedFor: a member that leaves gracefully is not
// looked for (its leave notice), one that crashes is.
func TestLeftMembersAreNotLookedFor(t *testing.T) {
	t.Parallel()
	nodes := startCluster(t, 3)
	a, b, c := nodes[0], nodes[1], nodes[2]
	if err := b.m.Leave(0); err != nil {
		t.Fatalf("%s: Leave() = %v", b.name, err)
	}
	b.stop(t)
	poll.Until(t, 10*time.Second, sees([]*gossipNode{a, c}, membersOf(a, c)), "%s leaves", b.name)
	c.stop(t) // a crash: no leave
	poll.Until(t, 10*time.Second, func() bool { return slices.Contains(a.m.deadNames(), c.name) }, "%s looks for %s", a.name, c.name)
	if got := a.m.deadNames(); !slices.Equal(got, []string{c.name}) {
		t.Errorf("%s looks for %v, want %s alone: %s left", a.name, got, c.name, b.name)
	}
}

// TestHealSchedule drives healLoop in a synctest bubble with a fake knock
// and contact step: a member declared dead is knocked on 250 ms after the
// verdict, then at doubling pauses up to HealInterval (±20 %); a knock
// from it is answered by one join of its address, at once; a knock from an
// alive member is answered by a join too, one from a stranger is not; a
// member alive again is knocked on no more; with no dead member the loop
// sleeps without a timer.
func TestHealSchedule(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		log, _ := testLogger(t)
		m, err := New(Config{NodeName: "a", GRPCAddr: "127.0.0.9:8081", Logger: log})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		start := time.Now()
		var mu sync.Mutex
		var knocks []time.Duration
		var joined []string
		knock := func(name, addr string) {
			if name != "b" || addr != "10.0.0.2:7946" {
				t.Errorf("knock(%q, %q), want b at 10.0.0.2:7946", name, addr)
			}
			mu.Lock()
			defer mu.Unlock()
			knocks = append(knocks, time.Since(start))
		}
		contact := func(_ context.Context, targets []string) (int, int, error) {
			mu.Lock()
			defer mu.Unlock()
			joined = append(joined, targets...)
			return len(targets), len(targets), nil
		}
		// sleep lets the bubble's clock run d and reads what happened.
		sleep := func(d time.Duration) (k []time.Duration, j []string) {
			time.Sleep(d)
			synctest.Wait()
			mu.Lock()
			defer mu.Unlock()
			return slices.Clone(knocks), slices.Clone(joined)
		}
		done := make(chan struct{})
		go func() {
			defer close(done)
			m.healLoop(ctx, knock, contact)
		}()
		if k, _ := sleep(time.Minute); len(k) != 0 {
			t.Fatalf("knocks with no dead member: %v", k)
		}

		h := &hooks{m: m}
		b := &memberlist.Node{Name: "b", Addr: net.ParseIP("10.0.0.2"), Port: 7946}
		h.NotifyJoin(b)
		start = time.Now()
		h.NotifyLeave(b)
		k, j := sleep(10 * time.Second)
		if len(k) < 8 || k[0] != 250*time.Millisecond {
			t.Fatalf("knocks at %v, want the first at 250ms and about one a second after", k)
		}
		want := []time.Duration{500 * time.Millisecond, time.Second}
		for i := 1; i < len(k); i++ {
			gap := k[i] - k[i-1]
			w := want[min(i-1, len(want)-1)]
			if gap < w*4/5 || gap > w*6/5 {
				t.Errorf("knock %d came %v after the one before, want %v ±20 %%", i+1, gap, w)
			}
		}
		if len(j) != 0 {
			t.Errorf("joined %v with no knock heard", j)
		}

		h.NotifyMsg(append([]byte{knockMsg}, "stranger"...))
		if _, j = sleep(0); len(j) != 0 {
			t.Errorf("a stranger's knock joined %v, want nothing", j)
		}
		h.NotifyMsg(append([]byte{knockMsg}, "b"...))
		if _, j = sleep(0); !slices.Equal(j, []string{"10.0.0.2:7946"}) {
			t.Fatalf("after b knocked: joined %v, want 10.0.0.2:7946 at once", j)
		}
		h.NotifyJoin(b) // the join brought it back
		n := len(k)
		if k, _ = sleep(10 * time.Second); len(k) != n {
			t.Errorf("%d knocks on b after it came back, want none", len(k)-n)
		}

		// b holds this node dead: its knock is answered by a join.
		h.NotifyMsg(append([]byte{knockMsg}, "b"...))
		if _, j = sleep(0); !slices.Equal(j, []string{"10.0.0.2:7946", "10.0.0.2:7946"}) {
			t.Errorf("after alive b knocked: joined %v, want 10.0.0.2:7946 a second time", j)
		}
		cancel()
		<-done
	})
}

// TestLeaveNoticeEndsTheSearch: a leave notice heard before or after the
// news of the leave keeps the member from being looked for, and is relayed
// once.
func TestLeaveNoticeEndsTheSearch(t *testing.T) {
	m, err := New(Config{NodeName: "a", GRPCAddr: "127.0.0.9:8081"})
	if err != nil {
		t.Fatal(err)
	}
	b := &memberlist.Node{Name: "b", Addr: net.ParseIP("10.0.0.2"), Port: 7946}
	c := &memberlist.Node{Name: "c", Addr: net.ParseIP("10.0.0.3"), Port: 7946}
	h := &hooks{m: m}
	h.NotifyJoin(b)
	h.NotifyJoin(c)
	h.NotifyMsg(newLeftNotice("b").Message()) // before memberlist's news
	h.NotifyLeave(b)
	h.NotifyLeave(c)
	h.NotifyMsg(newLeftNotice("c").Message()) // after it
	h.NotifyMsg(newLeftNotice("c").Message()) // again, from another relay
	if got := m.deadNames(); len(got) != 0 {
		t.Errorf("looked for after their leave notices: %v", got)
	}
	if got := m.notices.NumQueued(); got != 2 {
		t.Errorf("%d notices queued to relay, want 2 (b and c, once each)", got)
	}
	d := &memberlist.Node{Name: "d", Addr: net.ParseIP("10.0.0.4"), Port: 7946}
	h.NotifyJoin(d)
	h.NotifyLeave(d)
	if got := m.deadNames(); !slices.Equal(got, []string{"d"}) {
		t.Errorf("looked for %v, want d (it died without a notice)", got)
	}
	// A new node at d's address ends the search for d.
	h.NotifyJoin(&memberlist.Node{Name: "e", Addr: net.ParseIP("10.0.0.4"), Port: 7946})
	if got := m.deadNames(); len(got) != 0 {
		t.Errorf("looked for %v after another node took the address", got)
	}
}
