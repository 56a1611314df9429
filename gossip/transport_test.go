package gossip

import (
	"bytes"
	"errors"
	"io"
	"log"
	"net"
	"runtime"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
	"go.uber.org/goleak"
)

// startSockets starts a socketTransport on 127.0.0.1 and a free port, shut
// down when the test ends.
func startSockets(t *testing.T) *socketTransport {
	t.Helper()
	tr, err := listenSockets("127.0.0.1", 0, log.New(io.Discard, "", 0))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tr.Shutdown() })
	return tr
}

func (t *socketTransport) addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(t.port())) }

// nextPacket waits for a packet on ch.
func nextPacket(t *testing.T, ch <-chan *memberlist.Packet) *memberlist.Packet {
	t.Helper()
	select {
	case p := <-ch:
		return p
	case <-time.After(5 * time.Second):
		t.Fatal("no packet within 5 s")
		return nil
	}
}

// nextStream waits for a connection on ch.
func nextStream(t *testing.T, ch <-chan net.Conn) net.Conn {
	t.Helper()
	select {
	case c := <-ch:
		t.Cleanup(func() { _ = c.Close() })
		return c
	case <-time.After(5 * time.Second):
		t.Fatal("no connection within 5 s")
		return nil
	}
}

func TestSocketTransportPacketsBothWays(t *testing.T) {
	t.Parallel()
	a, b := startSockets(t), startSockets(t)
	send := func(from, to *socketTransport, msg string, write func() (time.Time, error)) {
		t.Helper()
		before := time.Now()
		if _, err := write(); err != nil {
			t.Fatalf("send %q: %v", msg, err)
		}
		p := nextPacket(t, to.PacketCh())
		if string(p.Buf) != msg || p.From.String() != from.addr() {
			t.Errorf("packet = %q from %v, want %q from %s", p.Buf, p.From, msg, from.addr())
		}
		if p.Timestamp.Before(before) || p.Timestamp.After(time.Now()) {
			t.Errorf("packet %q stamped %v, want between its send (%v) and its receipt", msg, p.Timestamp, before)
		}
	}
	send(a, b, "ping", func() (time.Time, error) { return a.WriteTo([]byte("ping"), b.addr()) })
	send(b, a, "ack", func() (time.Time, error) {
		return b.WriteToAddress([]byte("ack"), memberlist.Address{Addr: a.addr(), Name: "a"})
	})
}

func TestSocketTransportStreamsBothWays(t *testing.T) {
	t.Parallel()
	a, b := startSockets(t), startSockets(t)
	exchange := func(dial func() (net.Conn, error), to *socketTransport) {
		t.Helper()
		c, err := dial()
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		s := nextStream(t, to.StreamCh())
		if _, err := c.Write([]byte("push")); err != nil {
			t.Fatal(err)
		}
		got := make([]byte, 4)
		if _, err := io.ReadFull(s, got); err != nil || string(got) != "push" {
			t.Fatalf("server read %q, %v; want push", got, err)
		}
		if _, err := s.Write([]byte("pull")); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(c, got); err != nil || string(got) != "pull" {
			t.Fatalf("client read %q, %v; want pull", got, err)
		}
	}
	exchange(func() (net.Conn, error) { return a.DialTimeout(b.addr(), time.Second) }, b)
	exchange(func() (net.Conn, error) {
		return b.DialAddressTimeout(memberlist.Address{Addr: a.addr(), Name: "a"}, time.Second)
	}, a)
}

// The reader reuses one buffer: a packet handed over must keep its bytes
// after the next read, and hold no more than them (memberlist queues
// slices of it).
func TestSocketTransportPacketOwnsItsBytes(t *testing.T) {
	t.Parallel()
	tr := startSockets(t)
	c, err := net.Dial("udp", tr.addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	want := map[byte][]byte{'a': bytes.Repeat([]byte("a"), 300), 'b': bytes.Repeat([]byte("b"), 40)}
	for _, k := range []byte("ab") {
		if _, err := c.Write(want[k]); err != nil {
			t.Fatal(err)
		}
	}
	first := nextPacket(t, tr.PacketCh())
	second := nextPacket(t, tr.PacketCh()) // read into the same buffer
	for _, p := range []*memberlist.Packet{first, second} {
		w := want[p.Buf[0]]
		if !bytes.Equal(p.Buf, w) || cap(p.Buf) != len(w) {
			t.Errorf("packet = %q (cap %d), want %q (cap %d)", p.Buf, cap(p.Buf), w, len(w))
		}
	}
	if first.Buf[0] == second.Buf[0] {
		t.Errorf("both packets read %q", first.Buf[:1])
	}
}

func TestSocketTransportBindsOnePort(t *testing.T) {
	t.Parallel()
	c := &memberlist.Config{BindAddr: "127.0.0.1", Logger: log.New(io.Discard, "", 0)}
	mt, err := newSocketTransport(c)
	if err != nil {
		t.Fatal(err)
	}
	tr := mt.(*socketTransport)
	t.Cleanup(func() { _ = tr.Shutdown() })
	port := tr.port()
	if udp := tr.udp.LocalAddr().(*net.UDPAddr).Port; port == 0 || udp != port {
		t.Errorf("bound TCP port %d, UDP port %d; want one real port", port, udp)
	}
	if c.BindPort != port || c.AdvertisePort != port {
		t.Errorf("config ports bind %d, advertise %d; want %d", c.BindPort, c.AdvertisePort, port)
	}
	if _, err := listenSockets("127.0.0.1", port, nil); !errors.Is(err, syscall.EADDRINUSE) {
		t.Errorf("second bind of port %d: %v, want address in use", port, err)
	}
	advertise := []struct {
		ip       string
		port     int
		wantIP   string
		wantPort int
	}{
		{"", 0, "127.0.0.1", port},
		{"10.1.2.3", 7000, "10.1.2.3", 7000},
		{"fd00::1", 7001, "fd00::1", 7001},
	}
	for _, a := range advertise {
		ip, p, err := tr.FinalAdvertiseAddr(a.ip, a.port)
		if err != nil || !ip.Equal(net.ParseIP(a.wantIP)) || p != a.wantPort {
			t.Errorf("FinalAdvertiseAddr(%q, %d) = %v, %d, %v; want %s, %d", a.ip, a.port, ip, p, err, a.wantIP, a.wantPort)
		}
	}
	if ip, _, _ := tr.FinalAdvertiseAddr("10.1.2.3", 1); len(ip) != net.IPv4len {
		t.Errorf("FinalAdvertiseAddr(10.1.2.3) = %d bytes, want 4", len(ip))
	}
	if _, _, err := tr.FinalAdvertiseAddr("gossip.test", 1); err == nil {
		t.Error("FinalAdvertiseAddr(gossip.test) took a host name")
	}
}

// An all-interfaces bind advertises a private IP of the machine, or fails
// clearly where it has none.
func TestSocketTransportAdvertisesPrivateIP(t *testing.T) {
	t.Parallel()
	tr, err := listenSockets("0.0.0.0", 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tr.Shutdown() })
	ip, port, err := tr.FinalAdvertiseAddr("", 0)
	if err != nil {
		t.Logf("no private IP here: %v", err)
		return
	}
	if ip.IsUnspecified() || port != tr.port() {
		t.Errorf("FinalAdvertiseAddr = %v, %d; want a private IP and %d", ip, port, tr.port())
	}
}

// Shutdown ends the reader and the accept loop, though a packet and a
// connection wait for no one; it is idempotent. Not parallel: it counts
// goroutines.
func TestSocketTransportShutdown(t *testing.T) {
	before := goleak.IgnoreCurrent()
	tr, err := listenSockets("127.0.0.1", 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	addr := tr.addr()
	if _, err := tr.WriteTo([]byte("unread"), addr); err != nil {
		t.Fatal(err)
	}
	c, err := tr.DialTimeout(addr, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			if err := tr.Shutdown(); err != nil {
				t.Errorf("Shutdown() = %v", err)
			}
		})
	}
	wg.Wait()
	if err := tr.Shutdown(); err != nil {
		t.Errorf("third Shutdown() = %v", err)
	}
	if _, err := tr.WriteTo([]byte("late"), addr); err == nil {
		t.Error("WriteTo after Shutdown succeeded")
	}
	if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		c.Close()
		t.Error("a connection was accepted after Shutdown")
	}
	goleak.VerifyNone(t, before) // retries a while: goroutines of earlier tests may still be starting
}

// A packet read costs its own copy, not 64 KiB. Not parallel: it counts
// the process's allocations.
func TestSocketTransportBytesPerPacket(t *testing.T) {
	tr := startSockets(t)
	const packets = 200
	perPacket := bytesPerPacket(t, tr, packets)
	if perPacket > 4096 {
		t.Errorf("%d bytes allocated per 60-byte packet read, want ≤ 4096 (NetTransport: 64 KiB)", perPacket)
	}
}

// bytesPerPacket sends n 60-byte packets to tr one at a time, reads each,
// and returns the bytes the process allocated per packet.
func bytesPerPacket(t *testing.T, tr memberlist.Transport, n int) uint64 {
	t.Helper()
	s := newPacketSender(t, tr)
	for range 10 { // warm up
		s.roundTrip(t)
	}
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	for range n {
		s.roundTrip(t)
	}
	runtime.ReadMemStats(&m1)
	return (m1.TotalAlloc - m0.TotalAlloc) / uint64(n)
}

// packetSender sends 60-byte packets to a transport from a UDP socket of
// its own and reads them from the transport, allocating nothing itself.
type packetSender struct {
	c     net.Conn
	tr    memberlist.Transport
	msg   []byte
	timer *time.Timer
}

func newPacketSender(tb testing.TB, tr memberlist.Transport) *packetSender {
	tb.Helper()
	ip, port, err := tr.FinalAdvertiseAddr("", 0)
	if err != nil {
		tb.Fatal(err)
	}
	c, err := net.Dial("udp", net.JoinHostPort(ip.String(), strconv.Itoa(port)))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = c.Close() })
	return &packetSender{c: c, tr: tr, msg: make([]byte, 60), timer: time.NewTimer(time.Hour)}
}

// roundTrip sends one packet and reads it.
func (s *packetSender) roundTrip(tb testing.TB) {
	if _, err := s.c.Write(s.msg); err != nil {
		tb.Fatal(err)
	}
	s.timer.Reset(5 * time.Second)
	select {
	case p := <-s.tr.PacketCh():
		if len(p.Buf) != len(s.msg) {
			tb.Fatalf("read %d bytes, sent %d", len(p.Buf), len(s.msg))
		}
	case <-s.timer.C:
		tb.Fatal("packet not read within 5 s")
	}
}

// BenchmarkTransportPacketRead sends a 60-byte packet and reads it from
// PacketCh, through memberlist's NetTransport and through socketTransport:
// B/op is what one packet read costs.
func BenchmarkTransportPacketRead(b *testing.B) {
	quiet := log.New(io.Discard, "", 0)
	run := func(b *testing.B, tr memberlist.Transport) {
		b.Cleanup(func() { _ = tr.Shutdown() })
		s := newPacketSender(b, tr)
		b.ReportAllocs()
		for b.Loop() {
			s.roundTrip(b)
		}
	}
	b.Run("impl=NetTransport", func(b *testing.B) {
		nt, err := memberlist.NewNetTransport(&memberlist.NetTransportConfig{BindAddrs: []string{"127.0.0.1"}, Logger: quiet})
		if err != nil {
			b.Fatal(err)
		}
		run(b, nt)
	})
	b.Run("impl=socketTransport", func(b *testing.B) {
		tr, err := listenSockets("127.0.0.1", 0, quiet)
		if err != nil {
			b.Fatal(err)
		}
		run(b, tr)
	})
}
