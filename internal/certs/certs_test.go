package certs

import (
	"crypto/tls"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/shardlimiter/shardlimiter/internal/certs/certstest"
)

var peerLeaf = certstest.Leaf{CommonName: "peer", Client: true, Server: true}

func load(t *testing.T, p certstest.Paths) *Store {
	t.Helper()
	s, err := Load(Files{Cert: p.Cert, Key: p.Key, CA: p.CA})
	if err != nil {
		t.Fatalf("Load(%+v) = %v", p, err)
	}
	return s
}

// handshake runs one TLS handshake over loopback and returns the
// certificate the client saw and the server's and the client's error.
func handshake(t *testing.T, server, client *tls.Config) (serial string, serverErr, clientErr error) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	errc := make(chan error, 1)
	go func() {
		c, err := l.Accept()
		if err != nil {
			errc <- err
			return
		}
		defer c.Close()
		tc := tls.Server(c, server)
		c.SetDeadline(time.Now().Add(5 * time.Second))
		err = tc.Handshake()
		if err == nil {
			_, err = tc.Read(make([]byte, 1)) // TLS 1.3: the client certificate arrives after the client's handshake
		}
		errc <- err
	}()
	c, err := tls.Dial("tcp", l.Addr().String(), client)
	if err == nil {
		serial = c.ConnectionState().PeerCertificates[0].SerialNumber.String()
		_, clientErr = c.Write([]byte{1})
		c.Read(make([]byte, 1)) // the server's alert, if it refuses us
		c.Close()
	} else {
		clientErr = err
	}
	return serial, <-errc, clientErr
}

func TestLoadErrors(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ca := certstest.NewCA(t, "ca")
	good := ca.WriteFiles(t, dir, "good", peerLeaf)
	other := certstest.NewCA(t, "other").WriteFiles(t, dir, "other", peerLeaf)
	garbage := filepath.Join(dir, "garbage")
	os.WriteFile(garbage, []byte("not PEM"), 0o600)
	for _, tt := range []struct {
		name string
		f    Files
		want string
	}{
		{"nothing", Files{}, "no files"},
		{"cert without key", Files{Cert: good.Cert}, "needs its key"},
		{"missing file", Files{Cert: good.Cert, Key: filepath.Join(dir, "nope")}, "nope"},
		{"key of another certificate", Files{Cert: good.Cert, Key: other.Key}, "good.crt with"},
		{"CA without certificates", Files{Cert: good.Cert, Key: good.Key, CA: garbage}, "holds no PEM certificate"},
		{"unparsable certificate", Files{Cert: garbage, Key: good.Key}, "garbage"},
	} {
		if _, err := Load(tt.f); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: Load = %v, want an error containing %q", tt.name, err, tt.want)
		}
	}
}

func TestHandshakes(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ca, other := certstest.NewCA(t, "cluster"), certstest.NewCA(t, "other")
	server := load(t, ca.WriteFiles(t, dir, "server", peerLeaf))
	member := load(t, ca.WriteFiles(t, dir, "member", peerLeaf))
	outsider := load(t, other.WriteFiles(t, dir, "outsider", peerLeaf))
	expired := load(t, ca.WriteFiles(t, dir, "expired", certstest.Leaf{Client: true, Server: true,
		NotBefore: time.Now().Add(-48 * time.Hour), NotAfter: time.Now().Add(-24 * time.Hour)}))
	serverOnly := load(t, ca.WriteFiles(t, dir, "serveronly", certstest.Leaf{Server: true}))
	noCert, err := Load(Files{CA: filepath.Join(dir, "server-ca.crt")})
	if err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name           string
		server, client *Store
		wantOK         bool
	}{
		{"a member", server, member, true},
		{"no client certificate", server, noCert, false},
		{"client from another CA", server, outsider, false},
		{"expired client certificate", server, expired, false},
		{"client certificate without client usage", server, serverOnly, false},
		{"server from another CA", outsider, member, false},
		{"expired server certificate", expired, member, false},
	}
	for _, tt := range tests {
		_, serr, cerr := handshake(t, tt.server.ServerConfig(true), tt.client.ClientConfig())
		if ok := serr == nil && cerr == nil; ok != tt.wantOK {
			t.Errorf("%s: handshake server error %v, client error %v; want success %v", tt.name, serr, cerr, tt.wantOK)
		}
	}
	// Without requireClientCert, a client without a certificate is served.
	if _, serr, cerr := handshake(t, server.ServerConfig(false), noCert.ClientConfig()); serr != nil || cerr != nil {
		t.Errorf("TLS without client certificates: server %v, client %v; want success", serr, cerr)
	}
}

func TestReload(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ca := certstest.NewCA(t, "cluster")
	paths := ca.WriteFiles(t, dir, "server", peerLeaf)
	server := load(t, paths)
	client := load(t, ca.WriteFiles(t, dir, "client", peerLeaf))
	sc, cc := server.ServerConfig(true), client.ClientConfig()
	before, _, _ := handshake(t, sc, cc)

	if changed, err := server.Reload(); err != nil || changed {
		t.Errorf("Reload of unchanged files = %v, %v; want false, nil", changed, err)
	}
	// A renewal in place: the next handshake presents the new certificate.
	ca.WriteFiles(t, dir, "server", peerLeaf)
	if changed, err := server.Reload(); err != nil || !changed {
		t.Fatalf("Reload after renewal = %v, %v; want true, nil", changed, err)
	}
	after, _, _ := handshake(t, sc, cc)
	if before == "" || after == "" || before == after {
		t.Errorf("serial before renewal %s, after %s; want two different certificates", before, after)
	}
	// A half-written renewal: the previous material stays.
	os.WriteFile(paths.Key, []byte("-----BEGIN EC PRIVATE KEY-----\ntrunc"), 0o600)
	if _, err := server.Reload(); err == nil {
		t.Fatal("Reload of a truncated key = nil error")
	}
	if serial, serr, cerr := handshake(t, sc, cc); serr != nil || cerr != nil || serial != after {
		t.Errorf("after a failed reload: server %v, client %v, serial %s; want the renewed certificate %s", serr, cerr, serial, after)
	}
	// A new CA: the old CA's clients are refused on the next handshake, the
	// new CA's accepted.
	next := certstest.NewCA(t, "next")
	next.WriteFiles(t, dir, "server", peerLeaf)
	if _, err := server.Reload(); err != nil {
		t.Fatal(err)
	}
	if _, serr, _ := handshake(t, sc, cc); serr == nil {
		t.Error("a client of the replaced CA was accepted")
	}
	nextClient := load(t, next.WriteFiles(t, dir, "next-client", peerLeaf))
	if _, serr, cerr := handshake(t, sc, nextClient.ClientConfig()); serr != nil || cerr != nil {
		t.Errorf("a client of the new CA: server %v, client %v; want success", serr, cerr)
	}
	if got := server.NotAfter(); time.Until(got) < time.Hour {
		t.Errorf("NotAfter() = %v, want about a day ahead", got)
	}
}
