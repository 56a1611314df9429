package server

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/credentials"
)

// Listener names, as the refusal metric labels them.
const (
	ListenerGRPC = "grpc" // client gRPC API
	ListenerPeer = "peer" // peer RPCs
	ListenerHTTP = "http" // HTTP/JSON API
	// ListenerGubernatorHTTP is gubernator's HTTP gateway
	// (--gubernator-http-addr), under the client TLS like ListenerHTTP.
	ListenerGubernatorHTTP = "gubernator-http"
	// ListenerRESP is the Redis protocol's listener (--resp-addr), under
	// the client TLS too.
	ListenerRESP = "resp"
)

// HandshakeTimeout bounds a TLS handshake on a listener of this package:
// a connection that has not finished it by then is closed and counted as
// refused, so idle or slow handshakes cannot pile up.
const HandshakeTimeout = 10 * time.Second

// Refusal reasons of a failed server-side TLS handshake.
const (
	RefusedPlaintext     = "plaintext"       // the client does not speak TLS
	RefusedNoCertificate = "no_certificate"  // mTLS: the client sent no certificate
	RefusedBadCert       = "bad_certificate" // unknown CA, expired, wrong usage; or the client refused ours
	RefusedOther         = "other"           // timeout, reset, protocol error
)

// Refusal is called once per connection whose TLS handshake failed, with
// the listener's name (ListenerGRPC …), the remote address, a reason
// (RefusedPlaintext …) and the error. It must not block.
type Refusal func(listener, remote, reason string, err error)

// refusedReason classifies a failed server handshake.
func refusedReason(err error) string {
	var rh tls.RecordHeaderError
	var unknownCA x509.UnknownAuthorityError
	var invalid x509.CertificateInvalidError
	switch {
	case errors.As(err, &rh):
		return RefusedPlaintext
	case errors.As(err, &unknownCA), errors.As(err, &invalid):
		return RefusedBadCert
	case strings.Contains(err.Error(), "didn't provide a certificate"):
		return RefusedNoCertificate
	case remoteCertAlert(err.Error()):
		// The client refused our certificate: each end holds another CA's.
		return RefusedBadCert
	}
	return RefusedOther
}

// remoteCertAlert reports whether msg is the other end's alert about our
// certificate (RFC 8446 §6.2: bad_certificate, certificate_expired,
// certificate_unknown, unknown_ca), as crypto/tls words it. crypto/tls
// does not export the alert type of a TCP connection, hence the text.
func remoteCertAlert(msg string) bool {
	rest, ok := strings.CutPrefix(msg, "remote error: tls: ")
	return ok && (strings.Contains(rest, "certificate") || strings.Contains(rest, "unknown certificate authority"))
}

// ServerCredentials returns gRPC server credentials for cfg (the server's
// tls.Config; "h2" is added to its NextProtos) that report every failed
// handshake to refused (nil: none reported) under listener's name.
func ServerCredentials(cfg *tls.Config, listener string, refused Refusal) credentials.TransportCredentials {
	return &refusingCreds{TransportCredentials: credentials.NewTLS(cfg), listener: listener, refused: refused}
}

type refusingCreds struct {
	credentials.TransportCredentials
	listener string
	refused  Refusal
}

func (c *refusingCreds) ServerHandshake(conn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	out, info, err := c.TransportCredentials.ServerHandshake(conn)
	if err != nil && c.refused != nil {
		c.refused(c.listener, conn.RemoteAddr().String(), refusedReason(err), err)
	}
	return out, info, err
}

func (c *refusingCreds) Clone() credentials.TransportCredentials {
	return &refusingCreds{TransportCredentials: c.TransportCredentials.Clone(), listener: c.listener, refused: c.refused}
}

// TLSListener returns a listener whose Accept yields *tls.Conn connections
// that have completed their handshake under cfg within HandshakeTimeout;
// connections that fail it are closed and reported to refused (nil: none
// reported) under listener's name. Handshakes run concurrently, one
// goroutine per connection, so a slow client never holds up the others.
// For net/http, which logs nothing when a plaintext request reaches a TLS
// port: every refusal is seen here.
func TLSListener(inner net.Listener, cfg *tls.Config, listener string, refused Refusal) net.Listener {
	ctx, cancel := context.WithCancel(context.Background())
	return &tlsListener{Listener: inner, cfg: cfg, name: listener, refused: refused,
		conns: make(chan net.Conn), errc: make(chan error, 1), ctx: ctx, cancel: cancel}
}

type tlsListener struct {
	net.Listener
	cfg     *tls.Config
	name    string
	refused Refusal

	start  sync.Once
	conns  chan net.Conn   // handshaken connections
	errc   chan error      // the inner Accept's error, once
	ctx    context.Context // done once Close is called
	cancel context.CancelFunc
}

// Accept returns the next connection that completed its handshake.
func (l *tlsListener) Accept() (net.Conn, error) {
	l.start.Do(func() { go l.acceptLoop() })
	select {
	case c := <-l.conns:
		return c, nil
	case err := <-l.errc:
		l.errc <- err // every later Accept fails alike
		return nil, err
	case <-l.ctx.Done():
		return nil, net.ErrClosed
	}
}

func (l *tlsListener) acceptLoop() {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			l.errc <- err
			return
		}
		go l.handshake(c)
	}
}

func (l *tlsListener) handshake(c net.Conn) {
	ctx, cancel := context.WithTimeout(l.ctx, HandshakeTimeout)
	defer cancel()
	tc := tls.Server(c, l.cfg)
	if err := tc.HandshakeContext(ctx); err != nil {
		c.Close()
		if l.refused != nil && l.ctx.Err() == nil {
			l.refused(l.name, c.RemoteAddr().String(), refusedReason(err), err)
		}
		return
	}
	select {
	case l.conns <- tc:
	case <-l.ctx.Done():
		tc.Close()
	}
}

// Close stops accepting; handshakes in progress are dropped.
func (l *tlsListener) Close() error {
	l.cancel()
	return l.Listener.Close()
}
