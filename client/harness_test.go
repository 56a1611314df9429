package client

import (
	"context"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/shardlimiter/shardlimiter/api/native"
	"github.com/shardlimiter/shardlimiter/limit"
	"github.com/shardlimiter/shardlimiter/ring"
	"github.com/shardlimiter/shardlimiter/transport/server"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// fakeNode is a node of an in-process cluster: a real gRPC server on
// loopback whose checker answers every check with its own name as owner
// and records the batches it got. While gate is set, calls wait for a
// token on it.
type fakeNode struct {
	name string
	addr string
	srv  *server.Listener
	done chan struct{}
	gate chan struct{}

	mu      sync.Mutex
	batches []int
	keys    []string
}

func (n *fakeNode) Check(ctx context.Context, checks []limit.Check) ([]limit.Result, error) {
	n.mu.Lock()
	n.batches = append(n.batches, len(checks))
	for _, c := range checks {
		n.keys = append(n.keys, c.Key)
	}
	gate := n.gate
	n.mu.Unlock()
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	out := make([]limit.Result, len(checks))
	for i, c := range checks {
		out[i] = limit.Result{Owner: n.name}
		out[i].Allowed = c.Hits <= c.Rule.Limit
		out[i].Remaining = max(0, c.Rule.Limit-c.Hits)
	}
	return out, nil
}

func (n *fakeNode) got() (batches []int, keys []string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	return slices.Clone(n.batches), slices.Clone(n.keys)
}

// stop stops the node's server at once (a crash, as clients see it).
func (n *fakeNode) stop() {
	n.srv.Stop()
	<-n.done
}

// fakeCluster is n fakeNodes that all report the same ring, which the test
// may change.
type fakeCluster struct {
	nodes   []*fakeNode
	version atomic.Uint64
	mu      sync.Mutex
	members []ring.Member
}

func (c *fakeCluster) RingVersion() uint64 { return c.version.Load() }

func (c *fakeCluster) Membership() ring.Membership {
	c.mu.Lock()
	defer c.mu.Unlock()
	return ring.Membership{Node: "fake", Version: c.version.Load(), Members: slices.Clone(c.members),
		Config: ring.Config{PartitionCount: 101, ReplicationFactor: 20, Load: 1.25}}
}

func (c *fakeCluster) setMembers(nodes ...*fakeNode) {
	c.mu.Lock()
	c.members = c.members[:0]
	for _, n := range nodes {
		c.members = append(c.members, ring.Member{Name: n.name, Addr: n.addr})
	}
	c.mu.Unlock()
	c.version.Add(1)
}

// newFakeCluster starts n nodes; with serveRing they serve Cluster.
func newFakeCluster(t *testing.T, n int, serveRing bool) *fakeCluster {
	t.Helper()
	c := &fakeCluster{}
	for i := range n {
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		fn := &fakeNode{name: string(rune('a' + i)), addr: lis.Addr().String(), done: make(chan struct{})}
		var members native.MembershipSource
		if serveRing {
			members = c
		}
		fn.srv = server.NewClientListener(server.Config{})
		native.Register(fn.srv, fn, members)
		go func() { defer close(fn.done); fn.srv.Serve(lis) }()
		c.nodes = append(c.nodes, fn)
		t.Cleanup(fn.stop)
	}
	c.setMembers(c.nodes...)
	return c
}

func (c *fakeCluster) addrs() []string {
	var out []string
	for _, n := range c.nodes {
		out = append(out, n.addr)
	}
	return out
}

// newClient returns a client of the targets, closed at the end of the test.
func newClient(t *testing.T, cfg Config) *Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := New(ctx, cfg)
	if err != nil {
		t.Fatalf("New(%+v) = %v", cfg, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// testCtx bounds a test's calls so that a bug fails instead of hanging.
func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func mkCheck(key string, hits int64) limit.Check {
	return limit.Check{Name: "rule", Key: key, Hits: hits,
		Rule: limit.Rule{Algorithm: limit.TokenBucket, Limit: 10, Period: time.Second}}
}
