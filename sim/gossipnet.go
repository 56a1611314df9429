package sim

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"
)

// GossipNet is an in-memory network for memberlist: every member's
// transport delivers packets and streams to the others in this process,
// counts the bytes each member sends, and can drop a member (a crash) or
// cut the members into sides (a partition).
//
// memberlist's own MockNetwork (v0.7.0, mock_transport.go) is not used: its
// maps are unguarded (no member may be added while others run), its
// unbuffered packet channel blocks a sender whose receiver has shut down,
// and it has no loss, latency, byte counts or cuts.
//
// Packets behave as UDP datagrams: delivered after the latency, or dropped
// when the receiver is down, on the other side of a cut, or its queue is
// full. Streams are net.Pipe pairs; a dial across a cut or to a member
// that is down fails at once.
//
// Safe for concurrent use.
type GossipNet struct {
	latency time.Duration

	mu    sync.RWMutex
	nodes map[string]*gossipTransport // by "ip:port"
	side  map[string]int              // by "ip:port": members on different sides are cut off; nil: no partition

	total atomic.Int64 // bytes sent by every member ever on the network
}

// NewGossipNet returns an empty network whose packets take latency.
func NewGossipNet(latency time.Duration) *GossipNet {
	return &GossipNet{latency: latency, nodes: map[string]*gossipTransport{}}
}

// errGossipUnreachable fails a dial to a member that is down or cut off.
var errGossipUnreachable = errors.New("sim: gossip address unreachable")

// packetQueue is each transport's packet buffer: what a UDP socket's
// receive buffer would hold before the kernel drops.
const packetQueue = 4096

// Transport returns a factory for gossip.Config.Transport that binds a
// member at addr ("ip:port"), replacing whatever was there (a restart).
func (g *GossipNet) Transport(addr string) func(*memberlist.Config) (memberlist.Transport, error) {
	return func(c *memberlist.Config) (memberlist.Transport, error) {
		host, p, err := net.SplitHostPort(addr)
		if err != nil {
			return nil, err
		}
		port, err := strconv.Atoi(p)
		if err != nil {
			return nil, err
		}
		c.BindPort, c.AdvertisePort = port, port
		t := &gossipTransport{net: g, addr: addr, ip: net.ParseIP(host), port: port,
			packets: make(chan *memberlist.Packet, packetQueue), streams: make(chan net.Conn, 64)}
		g.mu.Lock()
		g.nodes[addr] = t
		g.mu.Unlock()
		return t, nil
	}
}

// Down takes the member at addr off the network at once (a crash): its
// packets and dials fail both ways.
func (g *GossipNet) Down(addr string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if t := g.nodes[addr]; t != nil {
		t.down.Store(true)
		delete(g.nodes, addr)
	}
}

// Partition cuts the network into sides: side maps a member's address to
// its side; members not in it are on side 0.
func (g *GossipNet) Partition(side map[string]int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.side = side
}

// Heal ends a Partition.
func (g *GossipNet) Heal() { g.Partition(nil) }

// Sent returns the bytes sent so far (packets and stream writes) by all
// members, those gone included.
func (g *GossipNet) Sent() int64 { return g.total.Load() }

// SentBy returns the bytes sent so far by each member on the network now,
// by address.
func (g *GossipNet) SentBy() map[string]int64 {
	g.mu.RLock()
	defer g.mu.RUnlock()
	out := make(map[string]int64, len(g.nodes))
	for a, t := range g.nodes {
		out[a] = t.sent.Load()
	}
	return out
}

// route returns the transport at to if from can reach it.
func (g *GossipNet) route(from, to string) (*gossipTransport, error) {
	g.mu.RLock()
	defer g.mu.RUnlock()
	t := g.nodes[to]
	if t == nil || t.down.Load() || (g.side != nil && g.side[from] != g.side[to]) {
		return nil, fmt.Errorf("%w: %s", errGossipUnreachable, to)
	}
	return t, nil
}

// gossipTransport is one member's memberlist.Transport on a GossipNet.
type gossipTransport struct {
	net     *GossipNet
	addr    string
	ip      net.IP
	port    int
	packets chan *memberlist.Packet
	streams chan net.Conn
	down    atomic.Bool
	sent    atomic.Int64 // bytes
}

var _ memberlist.NodeAwareTransport = (*gossipTransport)(nil)

type gossipAddr string

func (a gossipAddr) Network() string { return "sim" }
func (a gossipAddr) String() string  { return string(a) }

func (t *gossipTransport) FinalAdvertiseAddr(string, int) (net.IP, int, error) {
	return t.ip, t.port, nil
}

func (t *gossipTransport) WriteTo(b []byte, addr string) (time.Time, error) {
	return t.WriteToAddress(b, memberlist.Address{Addr: addr})
}

// WriteToAddress sends a datagram; like UDP it succeeds whether or not it
// arrives.
func (t *gossipTransport) WriteToAddress(b []byte, a memberlist.Address) (time.Time, error) {
	now := time.Now()
	if t.down.Load() {
		return now, nil
	}
	t.count(len(b))
	dest, err := t.net.route(t.addr, a.Addr)
	if err != nil {
		return now, nil
	}
	p := &memberlist.Packet{Buf: append([]byte(nil), b...), From: gossipAddr(t.addr)}
	deliver := func() {
		if dest.down.Load() {
			return
		}
		p.Timestamp = time.Now()
		select {
		case dest.packets <- p:
		default: // receive buffer full: dropped, as UDP would
		}
	}
	if t.net.latency > 0 {
		time.AfterFunc(t.net.latency, deliver)
	} else {
		deliver()
	}
	return now, nil
}

func (t *gossipTransport) PacketCh() <-chan *memberlist.Packet { return t.packets }

func (t *gossipTransport) DialTimeout(addr string, timeout time.Duration) (net.Conn, error) {
	return t.DialAddressTimeout(memberlist.Address{Addr: addr}, timeout)
}

// DialAddressTimeout connects a stream; the latency is paid once, at the
// dial.
func (t *gossipTransport) DialAddressTimeout(a memberlist.Address, timeout time.Duration) (net.Conn, error) {
	if t.down.Load() {
		return nil, errGossipUnreachable
	}
	if t.net.latency > 0 {
		time.Sleep(min(t.net.latency, timeout))
	}
	dest, err := t.net.route(t.addr, a.Addr)
	if err != nil {
		return nil, err
	}
	mine, theirs := net.Pipe()
	select {
	case dest.streams <- &countedConn{Conn: theirs, t: dest}:
	case <-time.After(timeout):
		mine.Close()
		theirs.Close()
		return nil, fmt.Errorf("sim: dial %s: timeout", a.Addr)
	}
	return &countedConn{Conn: mine, t: t}, nil
}

func (t *gossipTransport) StreamCh() <-chan net.Conn { return t.streams }

// IngestPacket and IngestStream are for transports layered on this one;
// none is.
func (t *gossipTransport) IngestPacket(net.Conn, net.Addr, time.Time, bool) error {
	return errors.New("sim: IngestPacket not supported")
}

func (t *gossipTransport) IngestStream(net.Conn) error {
	return errors.New("sim: IngestStream not supported")
}

// Shutdown takes the member off the network (memberlist calls it when it
// stops).
func (t *gossipTransport) Shutdown() error {
	t.down.Store(true)
	t.net.mu.Lock()
	if t.net.nodes[t.addr] == t {
		delete(t.net.nodes, t.addr)
	}
	t.net.mu.Unlock()
	return nil
}

func (t *gossipTransport) count(n int) {
	t.sent.Add(int64(n))
	t.net.total.Add(int64(n))
}

// countedConn counts the bytes written as sent by t.
type countedConn struct {
	net.Conn
	t *gossipTransport
}

func (c *countedConn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	c.t.count(n)
	return n, err
}
