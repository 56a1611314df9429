package resp

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/shardlimiter/shardlimiter/cell"
	"github.com/shardlimiter/shardlimiter/limit"
	"github.com/shardlimiter/shardlimiter/table"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// t0 is the fake clock's start; tables name their steps by offset.
const t0 = int64(1_700_000_000) * int64(time.Second)

// fakeNode decides Cell checks on a cell.Table at a clock the test sets,
// and every other check as admitted with its limit left; gate, when set,
// holds each call until it is closed.
type fakeNode struct {
	clock atomic.Int64
	cells *cell.Table
	calls atomic.Int64
	mu    sync.Mutex
	gate  chan struct{}
}

func newFakeNode() *fakeNode {
	n := &fakeNode{cells: cell.NewTable(table.Config{})}
	n.clock.Store(t0)
	return n
}

func (n *fakeNode) at(ms int64) { n.clock.Store(t0 + ms*int64(time.Millisecond)) }

func (n *fakeNode) Check(ctx context.Context, checks []limit.Check) ([]limit.Result, error) {
	n.calls.Add(1)
	n.mu.Lock()
	gate := n.gate
	n.mu.Unlock()
	if gate != nil {
		<-gate
	}
	now := n.clock.Load()
	out := make([]limit.Result, len(checks))
	for i, c := range checks {
		if err := c.Validate(); err != nil && c.Rule.Limit != 0 {
			out[i] = limit.Failed(limit.Invalid, err)
			continue
		}
		if c.Rule.Algorithm == limit.Cell {
			out[i].Decision = n.cells.Take(c.Key, now, c.Rule, c.Hits)
			continue
		}
		out[i].Decision = limit.Decision{Allowed: true, Remaining: c.Rule.Limit - c.Hits, ResetAt: now + int64(c.Rule.Period)}
	}
	return out, nil
}

// serve starts a Server of cfg (Checker: a new fakeNode unless set) on a
// loopback port and returns its address and the node.
func serve(t *testing.T, cfg Config) (string, *fakeNode) {
	t.Helper()
	n := newFakeNode()
	if cfg.Checker == nil {
		cfg.Checker = n
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := New(cfg)
	done := make(chan error, 1)
	go func() { done <- s.Serve(ln) }()
	t.Cleanup(func() {
		s.Close()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return ln.Addr().String(), n
}

// client returns a go-redis client of addr, closed at cleanup.
func client(t *testing.T, addr string, opt func(*redis.Options)) *redis.Client {
	t.Helper()
	o := &redis.Options{Addr: addr, MaxRetries: -1, PoolSize: 4, DialTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second}
	if opt != nil {
		opt(o)
	}
	c := redis.NewClient(o)
	t.Cleanup(func() { c.Close() })
	return c
}
