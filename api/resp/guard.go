package resp

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"
)

// The guard in front of redcon. redcon parses RESP well but bounds
// nothing: it waits for a bulk of any declared length, buffering it whole
// (a 512 MiB argument is 512 MiB of memory), and a declared length near
// the int range overflows its index arithmetic and panics the process
// (TestHugeBulkLength). So every connection's bytes pass through a guard
// that follows the framing (command headers and argument lengths only,
// never the arguments' bytes) and refuses, before redcon sees them:
//
//   - a command of more than MaxArgs arguments, an argument longer than
//     MaxBulk, an inline command line longer than MaxInline;
//   - more than MaxCommandBytes buffered for one command: the bytes read
//     since the last command boundary, which bounds redcon's buffer too
//     (it grows only while a command is incomplete);
//   - a command that has not arrived whole within IdleTimeout of its first
//     byte, and a connection idle for IdleTimeout.
//
// A refused connection is told why ("-ERR Protocol error: …") and
// closed; the guard never writes in the middle of redcon's replies, since
// redcon flushes them before it reads again.

// errRefused ends a connection the guard refused.
var errRefused = errors.New("resp: connection refused by the guard")

// framing states.
const (
	atStart      = iota // at a command boundary
	inInline            // an inline command line, until '\n'
	inCount             // the "*<n>" line, until '\n'
	atBulk              // expecting '$' of the next argument
	inBulkLen           // the "$<len>" line, until '\n'
	inBulk              // an argument's bytes and its CRLF
	maxHeaderLen = 24   // bytes of a "*<n>" or "$<len>" line
)

// guardConn is a client connection seen through the guard. Read runs on
// the connection's goroutine only (redcon's).
type guardConn struct {
	net.Conn
	lim Limits

	state   int
	header  []byte // the header line being read
	args    int    // arguments left in this command
	bulk    int64  // bytes left in this argument, CRLF included
	inline  int    // bytes of this inline line
	pending int    // bytes since the last command boundary
	since   time.Time
	refused string // why the connection was refused, once it was
	s       *Server
}

// Read reads and checks the next bytes; it refuses with errRefused.
func (g *guardConn) Read(p []byte) (int, error) {
	if g.refused != "" {
		return 0, errRefused
	}
	now := time.Now()
	deadline := now.Add(g.lim.IdleTimeout)
	if g.pending > 0 || g.state != atStart {
		deadline = g.since.Add(g.lim.IdleTimeout) // the command must arrive whole in time
	}
	g.Conn.SetReadDeadline(deadline)
	// Close sets closing, then wakes every read with a deadline of now:
	// looked at after this read's deadline is set, one of the two ends
	// the read at once.
	if g.s.closing.Load() {
		return 0, net.ErrClosed
	}
	n, err := g.Conn.Read(p)
	if n > 0 {
		if why := g.scan(p[:n], now); why != "" {
			g.refuse(why)
			return 0, errRefused
		}
	}
	return n, err
}

// Write bounds how long a reply may wait for a client that does not read.
func (g *guardConn) Write(p []byte) (int, error) {
	g.Conn.SetWriteDeadline(time.Now().Add(g.lim.IdleTimeout))
	return g.Conn.Write(p)
}

func (g *guardConn) refuse(why string) {
	g.refused = why
	g.Conn.SetWriteDeadline(time.Now().Add(time.Second))
	g.Conn.Write([]byte("-ERR Protocol error: " + why + "\r\n"))
}

// scan follows the framing over b, read at now, and returns why the
// connection must be refused, or "".
func (g *guardConn) scan(b []byte, now time.Time) string {
	for i := 0; i < len(b); i++ {
		if g.state == atStart && g.pending == 0 {
			g.since = now
		}
		g.pending++
		if g.pending > g.lim.MaxCommandBytes {
			return fmt.Sprintf("command longer than %d bytes", g.lim.MaxCommandBytes)
		}
		c := b[i]
		switch g.state {
		case atStart:
			g.header = g.header[:0]
			if c == '*' {
				g.state = inCount
			} else {
				g.state, g.inline = inInline, 0
				i-- // the byte is the line's first
				g.pending--
			}
		case inInline:
			if g.inline++; g.inline > g.lim.MaxInline {
				return fmt.Sprintf("inline command longer than %d bytes", g.lim.MaxInline)
			}
			if c == '\n' {
				g.boundary()
			}
		case inCount, inBulkLen:
			if why := g.headerByte(c); why != "" {
				return why
			}
		case atBulk:
			if c != '$' {
				return fmt.Sprintf("expected '$', got %q", c)
			}
			g.state, g.header = inBulkLen, g.header[:0]
		case inBulk:
			skip := min(int64(len(b)-i), g.bulk) // an argument's bytes are not looked at
			g.bulk -= skip
			g.pending += int(skip) - 1
			i += int(skip) - 1
			if g.pending > g.lim.MaxCommandBytes {
				return fmt.Sprintf("command longer than %d bytes", g.lim.MaxCommandBytes)
			}
			if g.bulk == 0 {
				g.nextArg()
			}
		}
	}
	return ""
}

// headerByte adds c to a "*<n>" or "$<len>" line and acts on its end.
func (g *guardConn) headerByte(c byte) string {
	if c != '\n' {
		if len(g.header) >= maxHeaderLen {
			return "header line too long"
		}
		g.header = append(g.header, c)
		return ""
	}
	line := g.header
	if len(line) == 0 || line[len(line)-1] != '\r' {
		return "header line without CRLF"
	}
	n, err := strconv.Atoi(string(line[:len(line)-1])) // as redcon reads it
	if err != nil {
		return "invalid length"
	}
	if g.state == inCount {
		if n <= 0 || n > g.lim.MaxArgs {
			return fmt.Sprintf("a command has 1 to %d arguments, got %d", g.lim.MaxArgs, n)
		}
		g.args, g.state = n, atBulk
		return ""
	}
	if n < 0 || n > g.lim.MaxBulk {
		return fmt.Sprintf("argument length must be in [0, %d], got %d", g.lim.MaxBulk, n)
	}
	g.bulk, g.state = int64(n)+2, inBulk
	return ""
}

// nextArg ends an argument.
func (g *guardConn) nextArg() {
	if g.args--; g.args > 0 {
		g.state = atBulk
		return
	}
	g.boundary()
}

// boundary ends a command.
func (g *guardConn) boundary() { g.state, g.pending = atStart, 0 }

// guardListener wraps each accepted connection in a guard and registers
// it with its server. When the inner listener fails (Close), Accept
// returns only once every connection has ended: redcon closes the
// connections left when its accept loop ends, and a graceful Close lets
// each answer its batch in flight first (Server.Close).
type guardListener struct {
	net.Listener
	s *Server
}

func (l guardListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		if l.s.closing.Load() {
			l.s.connWG.Wait()
		}
		return nil, err
	}
	g := &guardConn{Conn: c, lim: l.s.lim, s: l.s}
	l.s.track(g, true)
	return g, nil
}
