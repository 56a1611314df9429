package gossip

import (
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/netip"
	"sync"
	"syscall"
	"time"

	"github.com/hashicorp/go-sockaddr"
	"github.com/hashicorp/memberlist"
)

// socketTransport is memberlist's transport on one bind address: UDP
// packets and TCP streams on the same port, as memberlist's own
// NetTransport, which it replaces because of how it reads packets.
//
// NetTransport reads every UDP packet into a fresh 64 KiB buffer (the
// largest UDP payload) and hands memberlist that buffer, sliced to the
// packet. Gossip packets are a few dozen to a few hundred bytes, so an idle
// node allocated, and the runtime cleared, 64 KiB per probe and ack: about
// a tenth of an idle node's CPU samples, and the reason its garbage
// collector ran. socketTransport reads every packet into one buffer and
// hands memberlist an exact-size copy. BenchmarkTransportPacketRead, a
// 60-byte packet sent and read on loopback: 65,700 B and 5 allocations per
// packet with NetTransport, 180 B and 4 here; 27 µs against 8.5 µs on a
// busy machine (docs/PERFORMANCE.md, 2026-11-28). The copy cannot come
// from a pool: memberlist keeps a packet's Buf after reading it (alive,
// suspect, dead and user messages wait in its handoff queue, slices of Buf
// when gossip is not encrypted).
//
// Otherwise it behaves as NetTransport with one bind address, but for
// small things: a bind to port 0 is retried only when the port is taken,
// Shutdown does not wait out a pause of the accept loop, an IPv6
// all-interfaces bind advertises a private IP too, and it has no
// IngestPacket or IngestStream (memberlist v0.7.0 calls neither).
//
// Its methods are safe for concurrent use, as memberlist needs. Shutdown
// closes the sockets and returns once the reader and the accept loop have
// exited; it is idempotent.
type socketTransport struct {
	tcp     *net.TCPListener
	udp     *net.UDPConn
	logger  *log.Logger
	packets chan *memberlist.Packet
	streams chan net.Conn
	done    chan struct{} // closed by Shutdown
	stop    sync.Once
	wg      sync.WaitGroup
}

var _ memberlist.NodeAwareTransport = (*socketTransport)(nil)

const (
	// maxPacket is the largest UDP payload, the size of the read buffer.
	maxPacket = 65536
	// udpReadBuffer is the socket receive buffer asked for, halved until
	// the kernel accepts it (NetTransport's 2 MiB): a burst of gossip
	// waits there while the reader hands a packet over.
	udpReadBuffer = 2 << 20
	// bindAttempts is how often a bind to port 0 is tried: the TCP port
	// the kernel picks may be taken for UDP.
	bindAttempts = 10
	// acceptBaseDelay and acceptMaxDelay bound the pause after a failed
	// accept (descriptors exhausted), doubled at each failure in a row.
	acceptBaseDelay = 5 * time.Millisecond
	acceptMaxDelay  = time.Second
)

// newSocketTransport makes the transport for c, binding c.BindAddr and
// c.BindPort. When c.BindPort is 0 it sets c.BindPort and c.AdvertisePort
// to the port bound, as memberlist does for its own transport. It logs to
// c.Logger.
func newSocketTransport(c *memberlist.Config) (memberlist.Transport, error) {
	t, err := listenSockets(c.BindAddr, c.BindPort, c.Logger)
	if err != nil {
		return nil, err
	}
	if c.BindPort == 0 {
		c.BindPort = t.port()
		c.AdvertisePort = c.BindPort
	}
	return t, nil
}

// listenSockets binds TCP and UDP on ip:port and starts reading. Port 0
// picks a port free for both, retrying when the one picked is taken. A nil
// logger discards.
func listenSockets(ip string, port int, logger *log.Logger) (*socketTransport, error) {
	addr := net.ParseIP(ip)
	if addr == nil {
		return nil, fmt.Errorf("gossip: bind address %q is not an IP address", ip)
	}
	if logger == nil {
		logger = log.New(io.Discard, "", 0)
	}
	attempts := 1
	if port == 0 {
		attempts = bindAttempts
	}
	var err error
	for range attempts {
		var t *socketTransport
		if t, err = bindSockets(addr, port); err == nil {
			t.logger = logger
			t.wg.Go(t.readPackets)
			t.wg.Go(t.acceptStreams)
			return t, nil
		}
		if !errors.Is(err, syscall.EADDRINUSE) {
			break
		}
	}
	return nil, fmt.Errorf("gossip: start gossip: %w", err)
}

// bindSockets binds the TCP listener, then UDP on its port.
func bindSockets(ip net.IP, port int) (*socketTransport, error) {
	tcp, err := net.ListenTCP("tcp", &net.TCPAddr{IP: ip, Port: port})
	if err != nil {
		return nil, err
	}
	udp, err := net.ListenUDP("udp", &net.UDPAddr{IP: ip, Port: tcp.Addr().(*net.TCPAddr).Port})
	if err == nil {
		err = raiseReadBuffer(udp)
		if err != nil {
			_ = udp.Close()
		}
	}
	if err != nil {
		_ = tcp.Close()
		return nil, err
	}
	return &socketTransport{tcp: tcp, udp: udp, packets: make(chan *memberlist.Packet),
		streams: make(chan net.Conn), done: make(chan struct{})}, nil
}

// raiseReadBuffer asks for udpReadBuffer, halving until the kernel accepts.
func raiseReadBuffer(c *net.UDPConn) error {
	var err error
	for size := udpReadBuffer; size > 0; size /= 2 {
		if err = c.SetReadBuffer(size); err == nil {
			return nil
		}
	}
	return fmt.Errorf("set UDP receive buffer: %w", err)
}

func (t *socketTransport) port() int { return t.tcp.Addr().(*net.TCPAddr).Port }

// FinalAdvertiseAddr returns ip and port when ip is given; otherwise the
// bound IP and port, or for an all-interfaces bind the machine's first
// private IP (go-sockaddr's choice, as NetTransport's).
func (t *socketTransport) FinalAdvertiseAddr(ip string, port int) (net.IP, int, error) {
	if ip != "" {
		addr := net.ParseIP(ip)
		if addr == nil {
			return nil, 0, fmt.Errorf("gossip: advertise address %q is not an IP address", ip)
		}
		if v4 := addr.To4(); v4 != nil {
			addr = v4
		}
		return addr, port, nil
	}
	bound := t.tcp.Addr().(*net.TCPAddr)
	if !bound.IP.IsUnspecified() {
		return bound.IP, bound.Port, nil
	}
	private, err := sockaddr.GetPrivateIP()
	if err != nil {
		return nil, 0, fmt.Errorf("gossip: find a private IP to advertise: %w", err)
	}
	addr := net.ParseIP(private)
	if addr == nil {
		return nil, 0, errors.New("gossip: no private IP to advertise; set an advertise address")
	}
	return addr, bound.Port, nil
}

// WriteTo sends b to addr ("ip:port"; a host name is resolved) in one UDP
// packet and returns the time the write returned.
func (t *socketTransport) WriteTo(b []byte, addr string) (time.Time, error) {
	var err error
	if ap, perr := netip.ParseAddrPort(addr); perr == nil {
		_, err = t.udp.WriteToUDPAddrPort(b, netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port()))
	} else {
		var ua *net.UDPAddr
		if ua, err = net.ResolveUDPAddr("udp", addr); err == nil {
			_, err = t.udp.WriteToUDP(b, ua)
		}
	}
	return time.Now(), err
}

// WriteToAddress is WriteTo to a.Addr.
func (t *socketTransport) WriteToAddress(b []byte, a memberlist.Address) (time.Time, error) {
	return t.WriteTo(b, a.Addr)
}

// PacketCh delivers each packet read; its Buf is the packet's own.
func (t *socketTransport) PacketCh() <-chan *memberlist.Packet { return t.packets }

// DialTimeout opens a TCP connection to addr.
func (t *socketTransport) DialTimeout(addr string, timeout time.Duration) (net.Conn, error) {
	d := net.Dialer{Timeout: timeout}
	return d.Dial("tcp", addr)
}

// DialAddressTimeout is DialTimeout to a.Addr.
func (t *socketTransport) DialAddressTimeout(a memberlist.Address, timeout time.Duration) (net.Conn, error) {
	return t.DialTimeout(a.Addr, timeout)
}

// StreamCh delivers each TCP connection accepted.
func (t *socketTransport) StreamCh() <-chan net.Conn { return t.streams }

// Shutdown closes the sockets and waits for the reader and the accept loop
// to exit. A packet or connection not yet taken is dropped.
func (t *socketTransport) Shutdown() error {
	t.stop.Do(func() {
		close(t.done)
		_ = t.tcp.Close()
		_ = t.udp.Close()
	})
	t.wg.Wait()
	return nil
}

func (t *socketTransport) closed() bool {
	select {
	case <-t.done:
		return true
	default:
		return false
	}
}

// readPackets reads each packet into one buffer and sends a copy of
// exactly its bytes, stamped right after the read (memberlist measures
// round trips with it), until Shutdown.
func (t *socketTransport) readPackets() {
	buf := make([]byte, maxPacket)
	for {
		n, from, err := t.udp.ReadFromUDP(buf)
		now := time.Now()
		if err != nil {
			if t.closed() {
				return
			}
			t.logger.Printf("[ERR] memberlist: Error reading UDP packet: %v", err)
			continue
		}
		if n < 1 {
			t.logger.Printf("[ERR] memberlist: UDP packet too short (%d bytes) %s", n, memberlist.LogAddress(from))
			continue
		}
		own := make([]byte, n)
		copy(own, buf[:n])
		select {
		case t.packets <- &memberlist.Packet{Buf: own, From: from, Timestamp: now}:
		case <-t.done:
			return
		}
	}
}

// acceptStreams accepts TCP connections until Shutdown, pausing after
// failures (acceptBaseDelay, doubling up to acceptMaxDelay) so that a
// lasting one (no descriptors left) does not spin.
func (t *socketTransport) acceptStreams() {
	var delay time.Duration
	for {
		conn, err := t.tcp.AcceptTCP()
		if err != nil {
			if t.closed() {
				return
			}
			delay = min(max(2*delay, acceptBaseDelay), acceptMaxDelay)
			t.logger.Printf("[ERR] memberlist: Error accepting TCP connection: %v", err)
			select {
			case <-time.After(delay):
			case <-t.done:
				return
			}
			continue
		}
		delay = 0
		select {
		case t.streams <- conn:
		case <-t.done:
			_ = conn.Close()
			return
		}
	}
}
