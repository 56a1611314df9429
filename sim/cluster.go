package sim

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/shardlimiter/shardlimiter/gossip"
	"github.com/shardlimiter/shardlimiter/limit"
	"github.com/shardlimiter/shardlimiter/peer"
	"github.com/shardlimiter/shardlimiter/ring"
)

// Options configure a simulated cluster. Zero values are defaults.
type Options struct {
	// Seed seeds every choice the simulator makes (keys, entry members,
	// which member joins, leaves or crashes). memberlist's own choices
	// (probe order, gossip targets) and the Go scheduler are not seeded:
	// timings vary from run to run, ownership and key sets do not.
	Seed uint64
	// Latency delays every node-to-node call (peer.MemNet) and every
	// gossip packet and stream dial (GossipNet). 0: none.
	Latency time.Duration
	// ReplicationInterval is peer.Config's; 0 means 100 ms (the command's
	// default), negative turns replication off.
	ReplicationInterval time.Duration
	// Ring is every member's ring configuration (peer.Config.Ring).
	Ring ring.Config
	// Gossip, when set, adjusts each member's gossip configuration
	// before it starts.
	Gossip func(*gossip.Config)
	// Logger receives the nodes' and gossip's logs; nil discards them.
	Logger *slog.Logger
	// Progress, when set, is told each step of Run as it ends.
	Progress func(step string, took time.Duration)
	// GossipOnly runs each member's gossip (gossip.Membership on the
	// GossipNet) without its peer.Node: members agree when their member
	// lists name exactly the running members, and a ring is one rebuild
	// (RingBuild) behind that. For sizes at which every member rebuilding
	// its ring on every change costs more CPU than the machine has (1,000
	// members: ~30 ms a rebuild, N rebuilds a change); checks, handoffs and
	// replication need nodes and are not run.
	GossipOnly bool
}

// Member is one simulated node: a real peer.Node with real gossip (or
// either alone: Options.GossipOnly, Cluster.FormStatic), on
// in-memory networks.
type Member struct {
	Name       string
	GossipAddr string             // "ip:7946" on the GossipNet
	PeerAddr   string             // "ip:8082" on the PeerNet
	Node       *peer.Node         // nil with Options.GossipOnly
	Gossip     *gossip.Membership // nil in a cluster of Cluster.FormStatic

	cancel context.CancelFunc
	done   chan struct{}
	// listed is, with Options.GossipOnly, the fingerprint of the member
	// list Gossip last signalled (namesPrint), kept by runGossip so
	// that an agreement poll reads one number per member, not N names.
	listed atomic.Uint64
}

// Cluster runs simulated members in this process. Its methods are not
// safe for concurrent use, except Running and the measurements that call
// only it.
type Cluster struct {
	opt    Options
	Gossip *GossipNet
	Peers  *PeerNet
	Rand   *rand.Rand

	mu      sync.Mutex
	running []*Member
	seq     int // members ever started: the next name
}

// NewCluster returns a cluster with no members.
func NewCluster(opt Options) *Cluster {
	if opt.ReplicationInterval == 0 {
		opt.ReplicationInterval = 100 * time.Millisecond
	}
	if opt.ReplicationInterval < 0 {
		opt.ReplicationInterval = 0
	}
	if opt.Logger == nil {
		opt.Logger = slog.New(slog.DiscardHandler)
	}
	c := &Cluster{opt: opt, Gossip: NewGossipNet(opt.Latency), Peers: NewPeerNet(),
		Rand: rand.New(rand.NewPCG(opt.Seed, opt.Seed^0x5eed))}
	c.Peers.SetLatency(opt.Latency)
	return c
}

// Running returns the members started and not stopped, in start order.
func (c *Cluster) Running() []*Member {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.running)
}

// addr is the i-th member's IP: 10.x.y.z, distinct for 16M members.
func addr(i int) string { return fmt.Sprintf("10.%d.%d.%d", (i>>16)&255, (i>>8)&255, i&255) }

// memberName names the i-th member started.
func memberName(i int) string { return fmt.Sprintf("node-%04d", i) }

// Start starts one more member, seeded with up to three running members
// (a new cluster's first member has none), and returns it at once: it
// joins in the background.
func (c *Cluster) Start() (*Member, error) {
	c.mu.Lock()
	i := c.seq
	c.seq++
	var seeds []string
	for _, m := range c.running[:min(3, len(c.running))] {
		seeds = append(seeds, m.GossipAddr)
	}
	c.mu.Unlock()
	return c.start(memberName(i), addr(i+1), seeds)
}

// start runs a member called name at ip.
func (c *Cluster) start(name, ip string, seeds []string) (*Member, error) {
	m := &Member{Name: name, GossipAddr: ip + ":7946", PeerAddr: ip + ":8082", done: make(chan struct{})}
	gc := gossip.Config{NodeName: name, BindAddr: m.GossipAddr, GRPCAddr: ip + ":8081", PeerAddr: m.PeerAddr,
		Seeds: seeds, JoinRetry: 200 * time.Millisecond, Logger: c.opt.Logger.With("node", name),
		Transport: c.Gossip.Transport(m.GossipAddr)}
	if c.opt.Gossip != nil {
		c.opt.Gossip(&gc)
	}
	ms, err := gossip.New(gc)
	if err != nil {
		return nil, err
	}
	m.Gossip = ms
	run := m.runGossip
	if !c.opt.GossipOnly {
		if err := c.newNode(m, gc.GRPCAddr, ms); err != nil {
			return nil, err
		}
		run = m.Node.Run
	}
	c.run(m, run)
	c.mu.Lock()
	c.running = append(c.running, m)
	c.mu.Unlock()
	return m, nil
}

// newNode makes m's node, with g its membership, and puts it on the
// PeerNet.
func (c *Cluster) newNode(m *Member, grpcAddr string, g peer.Gossip) error {
	var err error
	m.Node, err = peer.New(peer.Config{Name: m.Name, GRPCAddr: grpcAddr, PeerAddr: m.PeerAddr, Gossip: g,
		Peers: c.Peers, ReplicationInterval: c.opt.ReplicationInterval, Ring: c.opt.Ring, Logger: c.opt.Logger.With("node", m.Name)})
	if err != nil {
		return err
	}
	c.Peers.Add(m.PeerAddr, m.Node)
	return nil
}

// run runs m (its node, or its gossip alone) until m.cancel.
func (c *Cluster) run(m *Member, run func(context.Context) error) {
	ctx, cancel := context.WithCancel(context.Background())
	m.cancel = cancel
	go func() {
		defer close(m.done)
		if err := run(ctx); err != nil {
			c.opt.Logger.Error("member stopped", "node", m.Name, "err", err)
		}
	}()
}

// runGossip runs m's gossip alone (Options.GossipOnly), and keeps
// m.listed as its member list changes, as a node keeps its ring.
func (m *Member) runGossip(ctx context.Context) error {
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-m.Gossip.Changed():
				ms := m.Gossip.Members()
				names := make([]string, len(ms))
				for i, x := range ms {
					names[i] = x.Name
				}
				m.listed.Store(namesPrint(names))
			}
		}
	})
	err := m.Gossip.Run(ctx)
	wg.Wait()
	return err
}

// namesPrint is a fingerprint of a sorted list of names.
func namesPrint(names []string) uint64 {
	h := fnv.New64a()
	for _, n := range names {
		h.Write([]byte(n))
		h.Write([]byte{0})
	}
	return h.Sum64()
}

// Form starts n members and waits until every one agrees on the ring of
// all of them, up to timeout per wave; it returns how long that took. Past 20
// members they start in waves of a tenth, each wave once the last one
// agrees: every member rebuilds its ring on each change, and a hundred
// joins at once in one process starve memberlist's probes of CPU until
// members suspect each other and the cluster flaps.
func (c *Cluster) Form(n int, timeout time.Duration) (time.Duration, error) {
	start := time.Now()
	wave := n
	if n > 20 {
		wave = max(10, n/10)
	}
	for started := 0; started < n; {
		t0 := time.Now()
		for range min(wave, n-started) {
			if _, err := c.Start(); err != nil {
				return 0, err
			}
			started++
		}
		if _, err := c.WaitAgree(t0, timeout); err != nil {
			return time.Since(start), err
		}
		if c.opt.Progress != nil {
			c.opt.Progress(fmt.Sprintf("form: %d members agree", started), time.Since(t0))
		}
	}
	return time.Since(start), nil
}

// drop removes m from the running members.
func (c *Cluster) drop(m *Member) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.running = slices.DeleteFunc(c.running, func(x *Member) bool { return x == m })
}

// Leave stops m gracefully: it hands its keys over and tells gossip, then
// stops serving.
func (c *Cluster) Leave(m *Member) error {
	var err error
	if m.Node != nil {
		err = m.Node.Leave()
	} else {
		err = m.Gossip.Leave(gossipLeaveTimeout)
	}
	c.drop(m)
	c.Peers.Remove(m.PeerAddr)
	m.cancel()
	<-m.done
	return err
}

// gossipLeaveTimeout bounds a gossip-only member's leave broadcast, as
// peer.Config.LeaveTimeout's default does a node's.
const gossipLeaveTimeout = 3 * time.Second

// Crash stops m at once: its gossip and peer addresses go dark before it
// can tell anyone.
func (c *Cluster) Crash(m *Member) {
	c.drop(m)
	c.Gossip.Down(m.GossipAddr)
	c.Peers.Remove(m.PeerAddr)
	m.cancel()
	<-m.done
}

// Restart leaves m gracefully and starts a member of the same name at the
// same addresses (a pod restarted in place), seeded with others.
func (c *Cluster) Restart(m *Member) (*Member, error) {
	if err := c.Leave(m); err != nil {
		return nil, err
	}
	var seeds []string
	for _, o := range c.Running()[:min(3, len(c.Running()))] {
		seeds = append(seeds, o.GossipAddr)
	}
	ip := m.GossipAddr[:len(m.GossipAddr)-len(":7946")]
	return c.start(m.Name, ip, seeds)
}

// GossipDrain is how long memberlist's goroutines may outlive a member's
// stop: memberlist.Shutdown does not wait for them, and a stream handler
// in flight ends within the 3 s stream timeout gossip sets (see
// gossip.Membership.Run). A synctest bubble's clock stops when its
// function returns, so a bubble that ran a cluster sleeps this long after
// Stop for its goroutines to exit.
const GossipDrain = 5 * time.Second

// Stop stops every member without leaving.
func (c *Cluster) Stop() {
	for _, m := range c.Running() {
		c.Crash(m)
	}
}

// Partition cuts the running members into two halves, gossip and peer
// calls alike, and returns them.
func (c *Cluster) Partition() (a, b []*Member) {
	all := c.Running()
	a, b = all[:len(all)/2], all[len(all)/2:]
	side := map[string]int{}
	for _, m := range b {
		side[m.GossipAddr] = 1
	}
	c.Gossip.Partition(side)
	for _, x := range a {
		for _, y := range b {
			c.Peers.Cut(x.Name, y.Name)
		}
	}
	return a, b
}

// Heal ends a Partition between a and b.
func (c *Cluster) Heal(a, b []*Member) {
	c.Gossip.Heal()
	for _, x := range a {
		for _, y := range b {
			c.Peers.Heal(x.Name, y.Name)
		}
	}
}

// ErrNoAgreement is returned when the members did not agree in time.
var ErrNoAgreement = errors.New("sim: members did not agree on the ring in time")

// WaitAgree waits until every running member routes by a ring of exactly
// the running members, up to timeout, and returns the time since start.
func (c *Cluster) WaitAgree(start time.Time, timeout time.Duration) (time.Duration, error) {
	return c.WaitAgreeOn(c.Running(), start, timeout)
}

// WaitAgreeOn waits until every member of group routes by a ring of
// exactly group, and returns the time since start.
func (c *Cluster) WaitAgreeOn(group []*Member, start time.Time, timeout time.Duration) (time.Duration, error) {
	want := make([]string, len(group))
	for i, m := range group {
		want[i] = m.Name
	}
	slices.Sort(want)
	// A poll reads every member's ring: N² names at N members, so it
	// runs less often in large clusters.
	every := max(5*time.Millisecond, time.Duration(len(group))*50*time.Microsecond)
	deadline := start.Add(timeout)
	for {
		if agree(group, want) {
			return time.Since(start), nil
		}
		if time.Now().After(deadline) {
			return time.Since(start), fmt.Errorf("%w: %d members, %v", ErrNoAgreement, len(group), timeout)
		}
		time.Sleep(every)
	}
}

// agree reports whether every member of group routes by the members want
// (with Options.GossipOnly: lists them as its members).
func agree(group []*Member, want []string) bool {
	var fp uint64
	for i, m := range group {
		if m.Node == nil {
			if i == 0 {
				fp = namesPrint(want)
			}
			if m.listed.Load() != fp {
				return false
			}
			continue
		}
		r := m.Node.Ring()
		if i == 0 {
			if !slices.Equal(r.Names, want) {
				return false
			}
			fp = r.Members
		} else if r.Members != fp {
			return false
		}
	}
	return true
}

// Check sends one batch into member m.
func (c *Cluster) Check(ctx context.Context, m *Member, checks []limit.Check) ([]limit.Result, error) {
	return m.Node.Check(ctx, checks)
}

// Pick returns a running member chosen by the cluster's seeded source.
func (c *Cluster) Pick() *Member {
	all := c.Running()
	return all[c.Rand.IntN(len(all))]
}
