package peer

import (
	"context"
	"fmt"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/shardlimiter/shardlimiter/api/native"
	"github.com/shardlimiter/shardlimiter/api/peers"
	"github.com/shardlimiter/shardlimiter/internal/poll"
	"github.com/shardlimiter/shardlimiter/limit"
	"github.com/shardlimiter/shardlimiter/ring"
	"github.com/shardlimiter/shardlimiter/transport"
	tserver "github.com/shardlimiter/shardlimiter/transport/server"
)

// staticGossip is a membership the test controls: every node of a
// testCluster sees the same member list, changed by the test.
type staticGossip struct {
	c       *testCluster
	changed chan struct{}
	left    bool
}

func (g *staticGossip) Run(ctx context.Context) error { <-ctx.Done(); return nil }
func (g *staticGossip) Members() []ring.Member        { return g.c.members() }
func (g *staticGossip) Changed() <-chan struct{}      { return g.changed }
func (g *staticGossip) Joined() bool                  { return true }
func (g *staticGossip) Leave(time.Duration) error {
	g.c.mu.Lock()
	g.left = true
	g.c.mu.Unlock()
	g.c.signal()
	return nil
}

// testNode is one node of an in-process cluster: a Node behind a real gRPC
// server on a loopback port, or on a MemNet.
type testNode struct {
	name   string
	addr   string
	node   *Node
	gossip *staticGossip
	srv    server
	cancel context.CancelFunc
	done   chan struct{}
	down   bool // server stopped (crash or leave)
	deaf   bool // not told of membership changes: its ring goes stale
}

// server is how a test stops a node's peer port: a gRPC server, or the
// node's place on a MemNet.
type server interface {
	Stop()
	GracefulStop()
}

// memServer is a node's place on a MemNet: stopping it makes the node
// unreachable.
type memServer struct {
	net  *MemNet
	addr string
}

func (s memServer) Stop()         { s.net.Remove(s.addr) }
func (s memServer) GracefulStop() { s.net.Remove(s.addr) }

// testCluster owns its nodes; everything stops in t.Cleanup.
type testCluster struct {
	t   *testing.T
	cfg Config
	// net, when set, connects the nodes instead of gRPC (newMemCluster).
	net *MemNet
	// perNode, when set, adjusts each node's config (e.g. a registry of
	// its own).
	perNode func(*Config)
	mu      sync.Mutex
	nodes   []*testNode
}

func newTestCluster(t *testing.T, n int, cfg Config) *testCluster {
	t.Helper()
	return newTestClusterWith(t, n, cfg, nil)
}

// newTestClusterWith is newTestCluster with perNode applied to each
// node's config.
func newTestClusterWith(t *testing.T, n int, cfg Config, perNode func(*Config)) *testCluster {
	t.Helper()
	c := &testCluster{t: t, cfg: cfg, perNode: perNode}
	for range n {
		c.add()
	}
	t.Cleanup(c.stopAll)
	c.waitSettled()
	return c
}

// newMemCluster is newTestCluster with the nodes connected by a MemNet,
// in memory, instead of gRPC servers on loopback ports.
func newMemCluster(t *testing.T, n int, cfg Config) *testCluster {
	t.Helper()
	c := &testCluster{t: t, cfg: cfg, net: NewMemNet()}
	for range n {
		c.add()
	}
	t.Cleanup(c.stopAll)
	c.waitSettled()
	return c
}

// members is the current member list: nodes up and not left.
func (c *testCluster) members() []ring.Member {
	c.mu.Lock()
	defer c.mu.Unlock()
	var ms []ring.Member
	for _, tn := range c.nodes {
		if !tn.down && !tn.gossip.left {
			ms = append(ms, ring.Member{Name: tn.name, Addr: tn.addr})
		}
	}
	return ms
}

// signal tells every running node that membership changed.
func (c *testCluster) signal() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, tn := range c.nodes {
		if tn.deaf {
			continue
		}
		select {
		case tn.gossip.changed <- struct{}{}:
		default:
		}
	}
}

// add starts one more node and tells everyone.
func (c *testCluster) add() *testNode {
	t := c.t
	var lis net.Listener
	addr := "" // on a MemNet: its name's
	if c.net == nil {
		var err error
		if lis, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
			t.Fatal(err)
		}
		addr = lis.Addr().String()
	}
	c.mu.Lock()
	tn := &testNode{name: fmt.Sprintf("node-%d", len(c.nodes)), addr: addr, done: make(chan struct{})}
	if tn.addr == "" {
		tn.addr = "mem:" + tn.name
	}
	tn.gossip = &staticGossip{c: c, changed: make(chan struct{}, 1)}
	c.nodes = append(c.nodes, tn)
	c.mu.Unlock()

	cfg := c.cfg
	cfg.Name, cfg.GRPCAddr, cfg.Gossip = tn.name, tn.addr, tn.gossip
	if c.net != nil {
		cfg.Peers = c.net
	}
	if c.perNode != nil {
		c.perNode(&cfg)
	}
	var err error
	if tn.node, err = New(cfg); err != nil {
		t.Fatal(err)
	}
	if err := tn.node.Restore(); err != nil {
		t.Fatal(err)
	}
	if c.net != nil {
		c.net.Add(tn.addr, tn.node)
		tn.srv = memServer{c.net, tn.addr}
	} else {
		srv := nodeListener(tn.node)
		go srv.Serve(lis)
		tn.srv = srv
	}
	ctx, cancel := context.WithCancel(context.Background())
	tn.cancel = cancel
	go func() { defer close(tn.done); tn.node.Run(ctx) }()
	c.signal()
	c.waitConverged()
	return tn
}

// waitConverged waits until every running node's ring holds exactly the
// current members. The deadlines here and in waitSettled are long
// for a CPU-starved test machine; a quiet one converges in milliseconds.
func (c *testCluster) waitConverged() {
	c.t.Helper()
	want := names(c.members())
	poll.Until(c.t, 20*time.Second, func() bool {
		for _, tn := range c.running() {
			if tn.deaf {
				continue
			}
			if !slices.Equal(names(tn.node.view.Load().snap.Members()), want) {
				return false
			}
		}
		return true
	}, "rings converge on %v", want)
}

func names(ms []ring.Member) []string {
	var out []string
	for _, m := range ms {
		out = append(out, m.Name)
	}
	return out
}

func (c *testCluster) running() []*testNode {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []*testNode
	for _, tn := range c.nodes {
		if !tn.down {
			out = append(out, tn)
		}
	}
	return out
}

// crash stops a node abruptly: its server and node stop without leaving;
// the others learn it is gone only when the test signals membership.
func (c *testCluster) crash(tn *testNode) {
	tn.srv.Stop()
	tn.cancel()
	<-tn.done
	c.mu.Lock()
	tn.down = true
	c.mu.Unlock()
}

// leave is a graceful departure: Leave, then stop serving.
func (c *testCluster) leave(tn *testNode) {
	if err := tn.node.Leave(); err != nil {
		c.t.Errorf("Leave(%s): %v", tn.name, err)
	}
	tn.srv.GracefulStop()
	tn.cancel()
	<-tn.done
	c.mu.Lock()
	tn.down = true
	c.mu.Unlock()
}

func (c *testCluster) stopAll() {
	for _, tn := range c.running() {
		tn.srv.Stop()
		tn.cancel()
		<-tn.done
	}
}

// check sends one batch to node i's Check.
func (c *testCluster) check(tn *testNode, checks ...limit.Check) []limit.Result {
	c.t.Helper()
	res, err := tn.node.Check(context.Background(), checks)
	if err != nil {
		c.t.Fatalf("Check on %s: %v", tn.name, err)
	}
	return res
}

// nodeListener is one listener with the node's client and peer APIs, as
// the tests' nodes serve them on one address.
func nodeListener(n *Node) *tserver.Listener {
	l := tserver.NewClientListener(tserver.Config{})
	native.Register(l, n, n)
	peers.Register(l, transport.CheckerFunc(n.CheckLocal), n)
	return l
}

// peerListener is a listener of the Peers service alone, answered by local.
func peerListener(local transport.Checker) *tserver.Listener {
	l := tserver.NewPeerListener(tserver.Config{})
	peers.Register(l, local, nil)
	return l
}
