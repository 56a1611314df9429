package server

import (
	"crypto/tls"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/shardlimiter/shardlimiter/internal/certs"
	"github.com/shardlimiter/shardlimiter/internal/certs/certstest"
)

type refusal struct{ listener, reason string }

// TestTLSListener: a client completing the handshake is accepted as a
// *tls.Conn that has finished it; plaintext, a missing certificate and a
// foreign one are refused, each reported once with its reason; Close ends
// Accept.
func TestTLSListener(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ca, other := certstest.NewCA(t, "ca"), certstest.NewCA(t, "other")
	leaf := certstest.Leaf{Client: true, Server: true}
	store := func(p certstest.Paths) *certs.Store {
		s, err := certs.Load(certs.Files{Cert: p.Cert, Key: p.Key, CA: p.CA})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	server, member, outsider := store(ca.WriteFiles(t, dir, "s", leaf)), store(ca.WriteFiles(t, dir, "m", leaf)), store(other.WriteFiles(t, dir, "o", leaf))
	noCert, err := certs.Load(certs.Files{CA: dir + "/s-ca.crt"})
	if err != nil {
		t.Fatal(err)
	}
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refused := make(chan refusal, 10)
	l := TLSListener(inner, server.ServerConfig(true), ListenerHTTP, func(listener, _, reason string, _ error) {
		refused <- refusal{listener, reason}
	})
	accepted := make(chan net.Conn, 10)
	acceptErr := make(chan error, 1)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				acceptErr <- err
				return
			}
			accepted <- c
		}
	}()
	dial := func(cfg *tls.Config) {
		c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", inner.Addr().String(), cfg)
		if err == nil {
			c.Write([]byte("x")) // TLS 1.3: the server sees the client certificate now
			c.Read(make([]byte, 1))
			c.Close()
		}
	}
	for _, tt := range []struct {
		name string
		do   func()
		want string // refusal reason; "" = accepted
	}{
		{"a member", func() { dial(member.ClientConfig()) }, ""},
		{"plaintext", func() {
			c, err := net.Dial("tcp", inner.Addr().String())
			if err == nil {
				c.Write([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"))
				c.Read(make([]byte, 1))
				c.Close()
			}
		}, RefusedPlaintext},
		{"no certificate", func() { dial(noCert.ClientConfig()) }, RefusedNoCertificate},
		{"another CA", func() { dial(outsider.ClientConfig()) }, RefusedBadCert},
	} {
		go tt.do()
		select {
		case c := <-accepted:
			tc, ok := c.(*tls.Conn)
			if tt.want != "" || !ok || !tc.ConnectionState().HandshakeComplete {
				t.Errorf("%s: accepted %T (handshake complete: %v); want refused (%s)", tt.name, c, ok && tc.ConnectionState().HandshakeComplete, tt.want)
			}
			c.Close()
		case r := <-refused:
			if r != (refusal{ListenerHTTP, tt.want}) {
				t.Errorf("%s: refused %+v, want %q", tt.name, r, tt.want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: neither accepted nor refused", tt.name)
		}
	}
	l.Close()
	select {
	case err := <-acceptErr:
		if !errors.Is(err, net.ErrClosed) {
			t.Errorf("Accept after Close = %v, want net.ErrClosed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Accept did not return after Close")
	}
}

func TestRefusedReasonOfARemoteAlert(t *testing.T) {
	t.Parallel()
	for msg, want := range map[string]bool{
		"remote error: tls: bad certificate":                true,
		"remote error: tls: unknown certificate authority":  true,
		"remote error: tls: expired certificate":            true,
		"remote error: tls: protocol version not supported": false,
		"EOF": false,
	} {
		if got := remoteCertAlert(msg); got != want {
			t.Errorf("remoteCertAlert(%q) = %v, want %v", msg, got, want)
		}
	}
}
