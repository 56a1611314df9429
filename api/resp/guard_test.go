package resp

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/shardlimiter/shardlimiter/internal/poll"
)

// rawConn dials addr and returns the connection, closed at cleanup.
func rawConn(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// readUntilClosed reads what the server sends until it closes the
// connection (or deadline passes: a failure) and returns it.
func readUntilClosed(t *testing.T, c net.Conn, deadline time.Duration) string {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(deadline))
	b, err := io.ReadAll(c)
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatalf("connection still open after %v (read %q)", deadline, b)
	}
	return string(b)
}

func heapInUse() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse
}

// TestBadInputClosesOnlyThatConnection: each bad input gets an error and
// its connection closed, a client beside it is answered throughout, and
// the server's heap does not grow with what the bad clients declared or
// sent.
func TestBadInputClosesOnlyThatConnection(t *testing.T) {
	addr, _ := serve(t, Config{Limits: Limits{IdleTimeout: 2 * time.Second}})
	good := client(t, addr, nil)
	ctx := context.Background()
	mb := bytes.Repeat([]byte("x"), 1<<20)
	heap := heapInUse()
	for _, tc := range []struct {
		name, send string
		more       []byte // sent after send, ignoring errors
		want       string // in the reply
	}{
		{"512 MiB bulk length", "*3\r\n$4\r\nECHO\r\n$536870912\r\n", mb, "-ERR Protocol error: argument length must be in [0, 16384], got 536870912"},
		{"bulk length near the int range (panics bare redcon)", "*2\r\n$4\r\nECHO\r\n$9223372036854775806\r\n", nil, "argument length must be"},
		{"negative bulk length", "*2\r\n$4\r\nECHO\r\n$-5\r\n", nil, "argument length must be"},
		{"huge argument count", "*4611686018427387904\r\n", nil, "a command has 1 to 64 arguments"},
		{"no '$'", "*1\r\n:5\r\n", nil, "expected '$'"},
		{"garbage length", "*1\r\n$abc\r\n", nil, "invalid length"},
		{"endless header", "*" + strings.Repeat("1", 100), nil, "header line too long"},
		{"endless inline line", strings.Repeat("a", 70<<10), nil, "longer than 65536 bytes"},
		{"command over the byte bound", "*65\r\n", nil, "a command has 1 to 64 arguments"},
		{"many arguments over the byte bound", "*64\r\n" + strings.Repeat("$16000\r\n"+strings.Repeat("y", 16000)+"\r\n", 5), nil, "command longer than 65536 bytes"},
	} {
		c := rawConn(t, addr)
		c.Write([]byte(tc.send))
		if tc.more != nil {
			for range 16 { // 16 MiB offered; the server must not keep it
				if _, err := c.Write(tc.more); err != nil {
					break
				}
			}
		}
		got := readUntilClosed(t, c, 10*time.Second)
		if !strings.Contains(got, tc.want) {
			t.Errorf("%s: server sent %q, want %q and the connection closed", tc.name, got, tc.want)
		}
		if err := good.Ping(ctx).Err(); err != nil {
			t.Fatalf("%s: the other client's PING: %v", tc.name, err)
		}
	}
	if grown := int64(heapInUse()) - int64(heap); grown > 8<<20 {
		t.Errorf("heap in use grew by %d bytes over the bad inputs, want under 8 MiB", grown)
	}
}

// TestStalledClientIsClosed: a command that stops half-way is closed
// within the idle timeout of its first byte, even while it trickles.
func TestStalledClientIsClosed(t *testing.T) {
	t.Parallel()
	addr, _ := serve(t, Config{Limits: Limits{IdleTimeout: 300 * time.Millisecond}})
	good := client(t, addr, nil)
	c := rawConn(t, addr)
	c.Write([]byte("*5\r\n$11\r\nCL.THROTTLE\r\n$3\r\nkey\r\n$1\r\n1"))
	start := time.Now()
	closed := make(chan struct{})
	go func() {
		defer close(closed)
		io.Copy(io.Discard, c)
	}()
	// Trickle a byte of nothing useful now and then: it must not keep the
	// half command alive.
	poll.Until(t, 5*time.Second, func() bool {
		select {
		case <-closed:
			return true
		default:
			c.Write([]byte("1"))
			return false
		}
	}, "stalled connection not closed")
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("closed after %v, want about the idle timeout (300ms)", d)
	}
	if err := good.Ping(context.Background()).Err(); err != nil {
		t.Fatalf("the other client's PING: %v", err)
	}
}

// TestMaxConns: the connection past the bound is told and closed; the
// others go on.
func TestMaxConns(t *testing.T) {
	t.Parallel()
	refused := make(chan string, 1)
	addr, _ := serve(t, Config{Limits: Limits{MaxConns: 2}, OnConnRefused: func(r string) { refused <- r }})
	a, b := rawConn(t, addr), rawConn(t, addr)
	for _, c := range []net.Conn{a, b} {
		c.Write([]byte("PING\r\n"))
		if line, err := bufio.NewReader(c).ReadString('\n'); err != nil || line != "+PONG\r\n" {
			t.Fatalf("PING = %q, %v", line, err)
		}
	}
	third := rawConn(t, addr)
	if got := readUntilClosed(t, third, 5*time.Second); !strings.Contains(got, "max number of clients") {
		t.Errorf("third connection got %q, want the max-clients error", got)
	}
	<-refused
	a.Write([]byte("PING\r\n"))
	if line, err := bufio.NewReader(a).ReadString('\n'); err != nil || line != "+PONG\r\n" {
		t.Fatalf("PING after the refusal = %q, %v", line, err)
	}
}
