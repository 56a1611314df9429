package resp

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tidwall/redcon"

	"github.com/shardlimiter/shardlimiter/limit"
	"github.com/shardlimiter/shardlimiter/transport"
	"github.com/shardlimiter/shardlimiter/transport/server"
)

// Limits bound what clients may hold of a node through this listener. A
// zero field takes its default.
type Limits struct {
	// MaxConns bounds open connections; more are closed at accept.
	// Default 1000. Each may buffer up to about 2×MaxCommandBytes.
	MaxConns int
	// MaxCommandBytes bounds one command's bytes, and so what a
	// connection buffers of a command not yet whole. Default 64 KiB.
	MaxCommandBytes int
	// MaxBulk bounds one argument's bytes (Redis allows 512 MiB).
	// Default 16 KiB: a key is at most limit.MaxKeyLen bytes.
	MaxBulk int
	// MaxInline bounds an inline command's line, as Redis does (64 KiB).
	MaxInline int
	// MaxArgs bounds a command's arguments. Default 64.
	MaxArgs int
	// MaxBatch bounds the checks of a pipeline decided as one batch; a
	// deeper pipeline is decided in several. Default 1000.
	MaxBatch int
	// IdleTimeout closes a connection that sends nothing for this long,
	// or whose command has not arrived whole this long after its first
	// byte, or that does not read its replies. Default 5 minutes.
	IdleTimeout time.Duration
}

func (l Limits) withDefaults() Limits {
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&l.MaxConns, 1000)
	def(&l.MaxCommandBytes, 64<<10)
	def(&l.MaxBulk, 16<<10)
	def(&l.MaxInline, 64<<10)
	def(&l.MaxArgs, 64)
	def(&l.MaxBatch, 1000)
	if l.IdleTimeout <= 0 {
		l.IdleTimeout = 5 * time.Minute
	}
	return l
}

// Info is what INFO and HELLO report of the node.
type Info struct {
	Version string // shardlimiter's version
	Node    string // this node's name
	Members int    // members of its ring
}

// Config configures a Server.
type Config struct {
	// Checker decides CL.THROTTLE's checks: the node.
	Checker transport.Checker
	// Rules decides SL.CHECK's: the node behind the rules files' rules
	// by name. Nil: Checker.
	Rules transport.Checker
	// InFlight is the client listeners' bound, shared fairly: each
	// connection is a party. Nil bounds nothing.
	InFlight *server.InFlight
	// Metrics counts calls (api "resp"), items and sheds. Nil counts
	// nothing.
	Metrics *server.Metrics
	// Password, when not empty, is required by AUTH (or HELLO … AUTH)
	// before any other command.
	Password string
	// Info reports the node for INFO and HELLO; nil reports nothing.
	Info func() Info
	// OnAuthFailure is called, without blocking, for each refused AUTH.
	OnAuthFailure func(remote string)
	// OnConnRefused is called, without blocking, for each connection
	// closed at accept for MaxConns.
	OnConnRefused func(remote string)
	Limits        Limits
}

// Server is the Redis protocol's listener.
type Server struct {
	cfg     Config
	lim     Limits
	pwSum   [sha256.Size]byte
	srv     *redcon.Server
	conns   atomic.Int64
	ids     atomic.Int64
	wg      sync.WaitGroup // one per accepted connection
	calls   [numCallKinds]*server.Calls
	ctx     context.Context
	stop    context.CancelFunc
	closeMu sync.Mutex
	closed  bool
	ln      net.Listener // Serve's; guarded by closeMu
	closing atomic.Bool
	connWG  sync.WaitGroup // accepted connections, until closedConn
	liveMu  sync.Mutex
	live    map[*guardConn]struct{} // connections accepted and not closed
}

// New returns a server of cfg. It starts nothing.
func New(cfg Config) *Server {
	if cfg.Rules == nil {
		cfg.Rules = cfg.Checker
	}
	s := &Server{cfg: cfg, lim: cfg.Limits.withDefaults(), pwSum: sha256.Sum256([]byte(cfg.Password)),
		live: map[*guardConn]struct{}{}}
	s.ctx, s.stop = context.WithCancel(context.Background())
	for k, name := range callNames {
		s.calls[k] = cfg.Metrics.Calls("resp", name, false)
	}
	s.srv = redcon.NewServerNetwork("tcp", "", s.handle, s.accept, s.closedConn)
	return s
}

// Serve answers the connections of ln until Close. ln may be a TLS
// listener (transport/server.TLSListener).
func (s *Server) Serve(ln net.Listener) error {
	s.closeMu.Lock()
	if s.closed {
		s.closeMu.Unlock()
		ln.Close()
		return nil
	}
	s.ln = ln
	s.wg.Add(1) // Serve itself, so that Close waits for it
	s.closeMu.Unlock()
	defer s.wg.Done()
	return s.srv.Serve(guardListener{Listener: ln, s: s})
}

// Close stops accepting and ends every connection: a connection
// deciding a batch answers it first, one waiting for a command is closed
// at once, and a reply its client does not read is given a second. It
// returns once every connection's goroutine has ended. Idempotent.
func (s *Server) Close() error {
	s.closeMu.Lock()
	first, ln := !s.closed, s.ln
	s.closed = true
	s.closeMu.Unlock()
	if first {
		s.closing.Store(true)
		s.liveMu.Lock()
		for g := range s.live {
			g.Conn.SetReadDeadline(time.Now())
			g.Conn.SetWriteDeadline(time.Now().Add(time.Second))
		}
		s.liveMu.Unlock()
		if ln != nil {
			s.srv.Close() // "not serving" until redcon has ln: closing ln ends it then
			ln.Close()
		}
	}
	s.wg.Wait()
	s.stop()
	return nil
}

// track adds or removes a connection of those Close must wake.
func (s *Server) track(g *guardConn, add bool) {
	s.liveMu.Lock()
	defer s.liveMu.Unlock()
	if add {
		s.live[g] = struct{}{}
	} else {
		delete(s.live, g)
	}
}

// session is one connection's state; only its goroutine touches it.
type session struct {
	g      *guardConn
	id     int64
	authed bool
	proto  int // 2 or 3
	name   string
	party  *server.Party
	batch  batch
}

func (s *Server) accept(c redcon.Conn) bool {
	g, _ := c.NetConn().(*guardConn)
	if s.conns.Add(1) > int64(s.lim.MaxConns) {
		s.conns.Add(-1)
		if g != nil {
			s.track(g, false)
		}
		if s.cfg.OnConnRefused != nil {
			s.cfg.OnConnRefused(c.RemoteAddr())
		}
		writeError(c, "ERR max number of clients reached")
		return false
	}
	s.wg.Add(1)
	s.connWG.Add(1)
	c.SetContext(&session{g: g, id: s.ids.Add(1), authed: s.cfg.Password == "", proto: 2,
		party: s.cfg.InFlight.Join(s.cfg.Metrics, server.ListenerRESP)})
	return true
}

func (s *Server) closedConn(c redcon.Conn, _ error) {
	if ss, ok := c.Context().(*session); ok {
		ss.party.Leave()
		if ss.g != nil {
			s.track(ss.g, false)
		}
		s.conns.Add(-1)
		s.connWG.Done()
		s.wg.Done()
	}
}

// checkPassword compares in constant time (over the digests, so that
// not even the length leaks).
func (s *Server) checkPassword(pw []byte) bool {
	sum := sha256.Sum256(pw)
	return subtle.ConstantTimeCompare(sum[:], s.pwSum[:]) == 1
}

// handle answers cmd and every command pipelined behind it, in order.
func (s *Server) handle(c redcon.Conn, cmd redcon.Command) {
	ss := c.Context().(*session)
	cmds := append([]redcon.Command{cmd}, c.ReadPipeline()...)
	b := &ss.batch
	for _, cmd := range cmds {
		if kind := kindOf(cmd.Args[0]); ss.authed && kind != notCheck {
			chk, msg := parseCheck(kind, cmd.Args)
			if msg == "" {
				b.add(chk, kind)
				if len(b.checks) >= s.lim.MaxBatch {
					s.decide(c, ss)
				}
				continue
			}
			s.decide(c, ss) // the replies before this one first
			writeError(c, msg)
			continue
		}
		s.decide(c, ss)
		if quit := s.command(c, ss, cmd.Args); quit {
			c.Close()
			return
		}
	}
	s.decide(c, ss)
}

var errShed = errors.New("resp: shed")

// decide answers the batch's checks, in order, and empties it.
func (s *Server) decide(c redcon.Conn, ss *session) {
	b := &ss.batch
	if len(b.checks) == 0 {
		return
	}
	start := time.Now()
	var res []limit.Result
	err := errShed
	if ss.party.Acquire(int64(len(b.checks))) {
		res, err = s.check(b)
		ss.party.Release()
	}
	b.reply(c, res, err, s.cfg.Metrics)
	d := time.Since(start)
	for _, k := range b.kinds {
		code := "OK"
		if err != nil {
			code = "ERROR"
		}
		s.calls[k].ObserveCode(code, 1, d)
	}
	b.reset()
}

// check decides the batch through the checkers: CL.THROTTLE's straight,
// SL.CHECK's behind the rules; a batch of both is split in two.
func (s *Server) check(b *batch) ([]limit.Result, error) {
	var cells, named int
	for _, k := range b.kinds {
		if k == callThrottle {
			cells++
		} else {
			named++
		}
	}
	switch {
	case named == 0:
		return s.cfg.Checker.Check(s.ctx, b.checks)
	case cells == 0:
		return s.cfg.Rules.Check(s.ctx, b.checks)
	}
	res := make([]limit.Result, len(b.checks))
	for _, want := range []callKind{callThrottle, callCheck} {
		var idx []int
		var sub []limit.Check
		for i, k := range b.kinds {
			if k == want {
				idx, sub = append(idx, i), append(sub, b.checks[i])
			}
		}
		ch := s.cfg.Checker
		if want == callCheck {
			ch = s.cfg.Rules
		}
		r, err := ch.Check(s.ctx, sub)
		if err != nil {
			return nil, err
		}
		for j, i := range idx {
			res[i] = r[j]
			b.checks[i] = sub[j] // the rule by name, for the reply's limit
		}
	}
	return res, nil
}

// Conns returns the connections open now.
func (s *Server) Conns() int64 { return s.conns.Load() }
