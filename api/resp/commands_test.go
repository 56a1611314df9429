package resp

import (
	"context"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shardlimiter/shardlimiter/internal/poll"
	"github.com/shardlimiter/shardlimiter/transport/server"
)

// TestConnectCommands: what clients send on connect and in pools, through
// go-redis under RESP3 (its default: HELLO 3 first) and RESP2.
func TestConnectCommands(t *testing.T) {
	t.Parallel()
	addr, _ := serve(t, Config{Info: func() Info { return Info{Version: "9.9.9", Node: "n1", Members: 3} }})
	ctx := context.Background()
	for _, proto := range []int{3, 2} {
		c := client(t, addr, func(o *redis.Options) { o.Protocol = proto; o.ClientName = "app-1" })
		if got, err := c.Ping(ctx).Result(); err != nil || got != "PONG" {
			t.Fatalf("RESP%d PING = %q, %v", proto, got, err)
		}
		if got, err := c.Echo(ctx, "hi\r\nthere").Result(); err != nil || got != "hi\r\nthere" {
			t.Errorf("ECHO = %q, %v", got, err)
		}
		if got, err := c.ClientGetName(ctx).Result(); err != nil || got != "app-1" {
			t.Errorf("CLIENT GETNAME after the client's SETNAME = %q, %v", got, err)
		}
		hello, err := c.Do(ctx, "HELLO", proto).Result()
		if err != nil {
			t.Fatalf("HELLO %d: %v", proto, err)
		}
		if proto == 3 {
			m, ok := hello.(map[any]any)
			if !ok || m["proto"] != int64(3) || m["server"] != "redis" {
				t.Errorf("HELLO 3 = %#v, want a map with proto 3", hello)
			}
		} else if a, ok := hello.([]any); !ok || len(a) != 14 {
			t.Errorf("HELLO 2 = %#v, want 7 pairs", hello)
		}
		if err := c.Do(ctx, "SELECT", 0).Err(); err != nil {
			t.Errorf("SELECT 0: %v", err)
		}
		if err := c.Do(ctx, "SELECT", 1).Err(); err == nil || err.Error() != "ERR DB index is out of range" {
			t.Errorf("SELECT 1 = %v", err)
		}
		if info, err := c.Info(ctx).Result(); err != nil || !strings.Contains(info, "shardlimiter_version:9.9.9") || !strings.Contains(info, "members:3") {
			t.Errorf("INFO = %q, %v", info, err)
		}
		if err := c.Do(ctx, "COMMAND", "DOCS").Err(); err != nil {
			t.Errorf("COMMAND DOCS: %v", err)
		}
		if err := c.Do(ctx, "FLUSHALL", "x\r\ny").Err(); err == nil || err.Error() != "ERR unknown command 'FLUSHALL', with args beginning with: 'x  y' " {
			t.Errorf("unknown command = %v", err)
		}
		if err := c.Do(ctx, "HELLO", 4).Err(); err == nil || !strings.HasPrefix(err.Error(), "NOPROTO") {
			t.Errorf("HELLO 4 = %v", err)
		}
	}
}

func TestAuth(t *testing.T) {
	t.Parallel()
	var failures atomic.Int64
	addr, n := serve(t, Config{Password: "s3cret", OnAuthFailure: func(string) { failures.Add(1) }})
	ctx := context.Background()

	none := client(t, addr, func(o *redis.Options) { o.Protocol = 2 })
	if err := throttle(ctx, none, []any{"k", 1, 1, 1}).Err(); err == nil || err.Error() != "NOAUTH Authentication required." {
		t.Errorf("CL.THROTTLE before AUTH = %v, want NOAUTH", err)
	}
	if calls := n.calls.Load(); calls != 0 {
		t.Errorf("a check before AUTH reached the node (%d calls)", calls)
	}
	wrong := client(t, addr, func(o *redis.Options) { o.Password = "guess" })
	if err := wrong.Ping(ctx).Err(); err == nil || !strings.HasPrefix(err.Error(), "WRONGPASS") {
		t.Errorf("PING with a wrong password = %v, want WRONGPASS", err)
	}
	if err := none.Do(ctx, "AUTH", "default", "nope").Err(); err == nil || !strings.HasPrefix(err.Error(), "WRONGPASS") {
		t.Errorf("AUTH default nope = %v", err)
	}
	if err := none.Do(ctx, "AUTH", "admin", "s3cret").Err(); err == nil || !strings.HasPrefix(err.Error(), "WRONGPASS") {
		t.Errorf("AUTH of another user = %v", err)
	}
	if failures.Load() < 3 {
		t.Errorf("%d failures counted, want at least 3", failures.Load())
	}
	for _, proto := range []int{2, 3} { // AUTH, or HELLO 3 AUTH
		good := client(t, addr, func(o *redis.Options) { o.Password = "s3cret"; o.Protocol = proto })
		if got := ints(t, throttle(ctx, good, []any{"k", 1, 1, 1})); got[0] != 0 {
			t.Errorf("RESP%d CL.THROTTLE after AUTH = %v", proto, got)
		}
	}
	noPw, _ := serve(t, Config{})
	c := client(t, noPw, nil)
	if err := c.Do(ctx, "AUTH", "x").Err(); err == nil || !strings.Contains(err.Error(), "without any password configured") {
		t.Errorf("AUTH without a password set = %v", err)
	}
}

// TestOverloadIsRefusedAtOnce: one connection's batch holds the whole
// in-flight bound in the node; another connection's check is refused at
// once with an error, not queued, and counted as a shed.
func TestOverloadIsRefusedAtOnce(t *testing.T) {
	t.Parallel()
	n := newFakeNode()
	gate := make(chan struct{})
	n.gate = gate
	bound := server.NewFairInFlight(2)
	addr, _ := serve(t, Config{Checker: n, InFlight: bound})
	ctx := context.Background()
	a := client(t, addr, nil)
	done := make(chan error, 1)
	go func() {
		p := a.Pipeline()
		throttle(ctx, p, []any{"a", 5, 1, 1})
		throttle(ctx, p, []any{"b", 5, 1, 1})
		_, err := p.Exec(ctx)
		done <- err
	}()
	poll.Until(t, 10*time.Second, func() bool { return bound.InUse() >= 2 }, "the pipeline never held the bound")
	b := client(t, addr, nil)
	if err := throttle(ctx, b, []any{"c", 5, 1, 1}).Err(); err == nil || !strings.HasPrefix(err.Error(), "ERR overloaded") {
		t.Errorf("a check past the bound = %v, want ERR overloaded", err)
	}
	n.mu.Lock()
	n.gate = nil
	n.mu.Unlock()
	close(gate)
	if err := <-done; err != nil {
		t.Errorf("the held pipeline: %v", err)
	}
	if err := throttle(ctx, b, []any{"c", 5, 1, 1}).Err(); err != nil {
		t.Errorf("after the bound freed: %v", err)
	}
}

// TestCloseAnswersTheBatchInFlight: Close lets a connection deciding a
// batch reply to it, closes an idle one at once, and returns once both
// have ended.
func TestCloseAnswersTheBatchInFlight(t *testing.T) {
	t.Parallel()
	n := newFakeNode()
	gate := make(chan struct{})
	n.gate = gate
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := New(Config{Checker: n})
	served := make(chan error, 1)
	go func() { served <- s.Serve(ln) }()
	ctx := context.Background()
	busy := client(t, ln.Addr().String(), func(o *redis.Options) { o.Protocol = 2 })
	idle := client(t, ln.Addr().String(), func(o *redis.Options) { o.Protocol = 2 })
	if err := idle.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	answered := make(chan error, 1)
	go func() { answered <- throttle(ctx, busy, []any{"k", 1, 1, 1}).Err() }()
	poll.Until(t, 10*time.Second, func() bool { return n.calls.Load() == 1 }, "the check never reached the node")
	closed := make(chan struct{})
	go func() { s.Close(); close(closed) }()
	poll.Until(t, 10*time.Second, func() bool { return s.Conns() == 1 }, "the idle connection was not closed at once")
	select {
	case <-closed:
		t.Fatal("Close returned while a batch was being decided")
	default:
	}
	n.mu.Lock()
	n.gate = nil
	n.mu.Unlock()
	close(gate)
	if err := <-answered; err != nil {
		t.Errorf("the batch in flight at Close: %v, want its reply", err)
	}
	<-closed
	if err := <-served; err != nil {
		t.Errorf("Serve: %v", err)
	}
}
