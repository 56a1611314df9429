package lease

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"

	"github.com/shardlimiter/shardlimiter/internal/certs/certstest"
	"github.com/shardlimiter/shardlimiter/limit"
	"github.com/shardlimiter/shardlimiter/transport"
	"github.com/shardlimiter/shardlimiter/transport/dial"
	"github.com/shardlimiter/shardlimiter/transport/server"
)

// recorder grants 5 hits of every request, or answers NotOwner, and
// records the requests.
type recorder struct {
	notOwner string
	mu       sync.Mutex
	got      []limit.LeaseRequest
}

func (r *recorder) Lease(_ context.Context, req limit.LeaseRequest) (limit.LeaseGrant, error) {
	r.mu.Lock()
	r.got = append(r.got, req)
	r.mu.Unlock()
	if r.notOwner != "" {
		return limit.LeaseGrant{NotOwner: r.notOwner}, nil
	}
	return limit.LeaseGrant{ID: 1, Hits: 5, TTL: 500 * time.Millisecond}, nil
}

func (r *recorder) requests() []limit.LeaseRequest {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]limit.LeaseRequest(nil), r.got...)
}

// serve starts a client listener on loopback with opts, the lease service
// registered under cfg, and returns its address.
func serve(t *testing.T, g Granter, cfg Config, opts ...grpc.ServerOption) (string, *Service) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := server.NewClientListener(server.Config{ServerOptions: opts})
	svc := Register(l, g, cfg)
	done := make(chan struct{})
	go func() { defer close(done); l.Serve(lis) }()
	t.Cleanup(func() { l.Stop(); <-done })
	return lis.Addr().String(), svc
}

func call(t *testing.T, addr string, r limit.LeaseRequest, opts ...grpc.DialOption) (limit.LeaseGrant, error) {
	t.Helper()
	bc, err := dial.NewBatchClient(addr, dial.PeerConfig{DialOptions: opts, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer bc.Close()
	return bc.Lease(context.Background(), r)
}

var tb = limit.Rule{Algorithm: limit.TokenBucket, Limit: 100, Period: time.Second}

func ask(from string) limit.LeaseRequest {
	return limit.LeaseRequest{From: from, Key: "\x04rulekey", Rule: tb, Want: 5}
}

func TestAnyoneIsNamedByAddressAndInstance(t *testing.T) {
	t.Parallel()
	rec := &recorder{}
	addr, svc := serve(t, rec, Config{Access: Anyone})
	g, err := call(t, addr, ask("inst-1"))
	if err != nil || g.Hits != 5 {
		t.Fatalf("Lease = %+v, %v; want 5 hits", g, err)
	}
	got := rec.requests()
	if len(got) != 1 || got[0].From != "addr:127.0.0.1/inst-1" || !got[0].Client || got[0].Key != "\x04rulekey" {
		t.Fatalf("the granter got %+v; want a client lessee named addr:127.0.0.1/inst-1", got)
	}
	if c := svc.Counts(); c.Granted != 1 {
		t.Errorf("Counts = %+v, want 1 granted", c)
	}
}

func TestNobodyIsRefusedLoggedAndCounted(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	var mu sync.Mutex
	log := slog.New(slog.NewTextHandler(writerFunc(func(p []byte) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		return buf.Write(p)
	}), nil))
	rec := &recorder{}
	addr, svc := serve(t, rec, Config{Logger: log})
	for range 3 {
		_, err := call(t, addr, ask("i"))
		if status.Code(err) != codes.PermissionDenied || !errors.Is(err, transport.ErrPermissionDenied) {
			t.Fatalf("Lease = %v; want PermissionDenied", err)
		}
	}
	if c := svc.Counts(); c.Refused != 3 || len(rec.requests()) != 0 {
		t.Errorf("Counts = %+v, granter asked %d times; want 3 refused, never asked", c, len(rec.requests()))
	}
	mu.Lock()
	defer mu.Unlock()
	if n := strings.Count(buf.String(), "client lease refused"); n != 1 {
		t.Errorf("log has %d refusal lines, want 1 (one per %v):\n%s", n, logEvery, buf.String())
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

func TestInvalidRequests(t *testing.T) {
	t.Parallel()
	rec := &recorder{}
	addr, svc := serve(t, rec, Config{Access: Anyone})
	long := strings.Repeat("x", MaxInstance+1)
	for name, r := range map[string]limit.LeaseRequest{
		"no instance":       {Key: "\x04rulekey", Rule: tb, Want: 1},
		"long instance":     {From: long, Key: "\x04rulekey", Rule: tb, Want: 1},
		"no unique key":     {From: "i", Key: "\x04rule", Rule: tb, Want: 1},
		"empty rule name":   {From: "i", Key: "\x00key", Rule: tb, Want: 1},
		"not a table key":   {From: "i", Key: "\xff", Rule: tb, Want: 1},
		"leaky bucket":      {From: "i", Key: "\x04rulekey", Rule: limit.Rule{Algorithm: limit.LeakyBucket, Limit: 1, Period: time.Second}, Want: 1},
		"negative leftover": {From: "i", Key: "\x04rulekey", Rule: tb, Leftover: -1, Release: 1},
	} {
		if _, err := call(t, addr, r); status.Code(err) != codes.InvalidArgument {
			t.Errorf("%s: Lease = %v; want InvalidArgument", name, err)
		}
	}
	if len(rec.requests()) != 0 || svc.Counts().Invalid != 7 {
		t.Errorf("granter asked %d times, counts %+v; want 0 and 7 invalid", len(rec.requests()), svc.Counts())
	}
}

func TestNotOwnerPassesThrough(t *testing.T) {
	t.Parallel()
	addr, svc := serve(t, &recorder{notOwner: "node-b"}, Config{Access: Anyone})
	g, err := call(t, addr, ask("i"))
	if err != nil || g.NotOwner != "node-b" || g.Hits != 0 {
		t.Fatalf("Lease = %+v, %v; want NotOwner node-b", g, err)
	}
	if svc.Counts().NotOwner != 1 {
		t.Errorf("Counts = %+v, want 1 not_owner", svc.Counts())
	}
}

// TestCertifiedNamesTheCertificate: under mTLS the lessee is the client
// certificate's common name and the instance; a listener that lets a
// client in without a certificate does not let it hold leases.
func TestCertifiedNamesTheCertificate(t *testing.T) {
	t.Parallel()
	ca := certstest.NewCA(t, "clients")
	srvCert, srvKey := ca.Issue(t, certstest.Leaf{Server: true, IPs: []net.IP{net.IPv4(127, 0, 0, 1)}})
	cliCert, cliKey := ca.Issue(t, certstest.Leaf{Client: true, CommonName: "app-a"})
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca.CertPEM())
	pair := func(c, k []byte) tls.Certificate {
		p, err := tls.X509KeyPair(c, k)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, tc := range []struct {
		name     string
		auth     tls.ClientAuthType
		withCert bool
		wantFrom string // empty: refused
	}{
		{"mTLS", tls.RequireAndVerifyClientCert, true, "cn:app-a/i"},
		{"no certificate", tls.VerifyClientCertIfGiven, false, ""},
	} {
		rec := &recorder{}
		scfg := &tls.Config{Certificates: []tls.Certificate{pair(srvCert, srvKey)}, ClientCAs: pool, ClientAuth: tc.auth, MinVersion: tls.VersionTLS12}
		addr, _ := serve(t, rec, Config{Access: Certified}, grpc.Creds(credentials.NewTLS(scfg)))
		ccfg := &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
		if tc.withCert {
			ccfg.Certificates = []tls.Certificate{pair(cliCert, cliKey)}
		}
		_, err := call(t, addr, ask("i"), grpc.WithTransportCredentials(credentials.NewTLS(ccfg)))
		if tc.wantFrom == "" {
			if status.Code(err) != codes.PermissionDenied {
				t.Errorf("%s: Lease = %v; want PermissionDenied", tc.name, err)
			}
			continue
		}
		if got := rec.requests(); err != nil || len(got) != 1 || got[0].From != tc.wantFrom {
			t.Errorf("%s: Lease = %v, granter got %+v; want lessee %s", tc.name, err, got, tc.wantFrom)
		}
	}
}
