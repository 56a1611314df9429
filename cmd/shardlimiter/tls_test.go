package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/shardlimiter/shardlimiter/internal/certs/certstest"
	"github.com/shardlimiter/shardlimiter/internal/poll"
	"github.com/shardlimiter/shardlimiter/limit"
	"github.com/shardlimiter/shardlimiter/transport/dial"
)

// pki is a test CA with the files of one server and of clients.
type pki struct {
	ca     *certstest.CA
	dir    string
	server certstest.Paths
}

func newPKI(t *testing.T, name string) *pki {
	t.Helper()
	p := &pki{ca: certstest.NewCA(t, name), dir: t.TempDir()}
	p.server = p.ca.WriteFiles(t, p.dir, "server", certstest.Leaf{Server: true, Client: true, IPs: []net.IP{net.IPv4(127, 0, 0, 1)}})
	return p
}

// clientPKI returns a server's PKI named name and three client
// certificates: one of its CA, one of another CA, one of its CA expired.
func clientPKI(t *testing.T, name string) (p *pki, good, foreign, expired certstest.Paths) {
	t.Helper()
	p, other := newPKI(t, name), newPKI(t, name+"-other")
	good = p.ca.WriteFiles(t, p.dir, "good", certstest.Leaf{Client: true})
	foreign = other.ca.WriteFiles(t, other.dir, "foreign", certstest.Leaf{Client: true})
	expired = p.ca.WriteFiles(t, p.dir, "expired", certstest.Leaf{Client: true,
		NotBefore: time.Now().Add(-48 * time.Hour), NotAfter: time.Now().Add(-24 * time.Hour)})
	return p, good, foreign, expired
}

// client returns a tls.Config trusting p's CA and presenting cert (nil:
// no certificate).
func (p *pki) client(t *testing.T, cert *certstest.Paths) *tls.Config {
	t.Helper()
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(p.ca.CertPEM())
	c := &tls.Config{RootCAs: roots, ServerName: "127.0.0.1"}
	if cert != nil {
		kp, err := tls.LoadX509KeyPair(cert.Cert, cert.Key)
		if err != nil {
			t.Fatal(err)
		}
		// Always presented, even when the server asks for another CA's
		// (Go's client would otherwise send none): the server must refuse
		// it, not merely not receive it.
		c.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &kp, nil }
	}
	return c
}

// grpcCheck makes one check over gRPC with creds, on a fresh connection.
func grpcCheck(t *testing.T, addr string, creds credentials.TransportCredentials) error {
	t.Helper()
	c, err := dial.Dial(addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err = c.GetRateLimits(ctx, []limit.Check{{Name: "tls", Key: "k", Hits: 1, Rule: limit.Rule{Limit: 100, Period: time.Minute}}})
	return err
}

func httpsClient(cfg *tls.Config) *http.Client {
	return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg}}
}

// TestClientTLS turns on client TLS with required client certificates and
// a plain health listener. A valid client is answered over gRPC and HTTP;
// a client without a certificate, with one from another CA, with an
// expired one, or speaking plaintext is refused, each refusal logged and
// counted; probes work on the health address; and a certificate replaced on
// disk is served on the next handshake while a connection opened before
// keeps working.
func TestClientTLS(t *testing.T) {
	t.Parallel()
	p, good, foreign, expired := clientPKI(t, "clients")
	s := serve(t, "--tls-cert-file", p.server.Cert, "--tls-key-file", p.server.Key,
		"--tls-client-ca-file", p.server.CA, "--health-addr", "127.0.0.1:0")

	if err := grpcCheck(t, s.grpc, credentials.NewTLS(p.client(t, &good))); err != nil {
		t.Fatalf("gRPC with a valid client certificate: %v", err)
	}
	goodHTTP := httpsClient(p.client(t, &good))
	if resp, err := goodHTTP.Get("https://" + s.http + "/v1/cluster"); err != nil || resp.StatusCode != 200 {
		t.Fatalf("HTTPS with a valid client certificate: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}
	// Key inspection is on the same listener, under the same TLS.
	if resp, err := goodHTTP.Get("https://" + s.http + "/v1/keys?name=a&key=k&limit=1&duration_ms=1000"); err != nil || resp.StatusCode != 200 {
		t.Fatalf("GET /v1/keys with a valid client certificate: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}
	if resp, err := httpsClient(p.client(t, nil)).Get("https://" + s.http + "/v1/keys?name=a&key=k&limit=1&duration_ms=1000"); err == nil {
		resp.Body.Close()
		t.Errorf("GET /v1/keys without a client certificate answered %d; want it refused", resp.StatusCode)
	}

	refused := []struct {
		name  string
		creds credentials.TransportCredentials
		http  *http.Client
	}{
		{"no client certificate", credentials.NewTLS(p.client(t, nil)), httpsClient(p.client(t, nil))},
		{"a certificate from another CA", credentials.NewTLS(p.client(t, &foreign)), httpsClient(p.client(t, &foreign))},
		{"an expired certificate", credentials.NewTLS(p.client(t, &expired)), httpsClient(p.client(t, &expired))},
		{"plaintext", insecure.NewCredentials(), &http.Client{Timeout: 5 * time.Second}},
	}
	for _, r := range refused {
		if err := grpcCheck(t, s.grpc, r.creds); err == nil {
			t.Errorf("gRPC with %s was answered; want it refused", r.name)
		}
		scheme := "https://"
		if r.name == "plaintext" {
			scheme = "http://"
		}
		if resp, err := r.http.Get(scheme + s.http + "/v1/cluster"); err == nil {
			resp.Body.Close()
			t.Errorf("HTTP with %s answered %d; want it refused", r.name, resp.StatusCode)
		}
	}
	url := "https://" + s.http
	for _, want := range []struct{ listener, reason string }{
		{"grpc", "no_certificate"}, {"grpc", "bad_certificate"}, {"grpc", "plaintext"},
		{"http", "no_certificate"}, {"http", "bad_certificate"}, {"http", "plaintext"},
	} {
		labels := []string{`listener="` + want.listener + `"`, `reason="` + want.reason + `"`}
		poll.Until(t, 5*time.Second, func() bool { return metric(goodHTTP, url, "shardlimiter_tls_refused_total", labels...) >= 1 },
			"shardlimiter_tls_refused_total{%s} counts the refusal", strings.Join(labels, ","))
	}
	if n := metric(goodHTTP, url, "shardlimiter_tls_refused_total", `reason="bad_certificate"`); n < 4 {
		t.Errorf("bad_certificate refusals = %v, want ≥ 4 (another CA and expired, gRPC and HTTP); log:\n%s", n, s.stderr)
	}
	if log := s.stderr.String(); !strings.Contains(log, "TLS handshake refused") {
		t.Errorf("no refusal in the log:\n%s", log)
	}

	// The check subcommand speaks TLS too.
	var out, errOut bytes.Buffer
	args := []string{"check", "--server", s.grpc, "--name", "tls", "--key", "cli", "--limit", "5",
		"--tls-ca", p.server.CA, "--tls-cert", good.Cert, "--tls-key", good.Key}
	if code := run(context.Background(), args, env(), &out, &errOut); code != exitOK {
		t.Errorf("shardlimiter check over mTLS exited %d: %s%s", code, out.String(), errOut.String())
	}
	if code := run(context.Background(), args[:len(args)-4], env(), &out, &errOut); code != exitFail {
		t.Errorf("shardlimiter check without a client certificate exited %d, want %d (refused)", code, exitFail)
	}

	// Probes: plain HTTP on the health address, and nothing else there.
	for path, want := range map[string]int{"/healthz": 200, "/readyz": 200, "/metrics": 404, "/v1/cluster": 404} {
		poll.Until(t, 5*time.Second, func() bool {
			resp, err := http.Get("http://" + s.health + path)
			if err != nil {
				return false
			}
			resp.Body.Close()
			return resp.StatusCode == want
		}, "GET %s on the health address answers %d", path, want)
	}

	// Rotation: a connection made before the renewal keeps working, and the
	// next handshake presents the renewed certificate.
	before := serverSerial(t, s.grpc, p.client(t, &good))
	kept, err := dial.Dial(s.grpc, grpc.WithTransportCredentials(credentials.NewTLS(p.client(t, &good))))
	if err != nil {
		t.Fatal(err)
	}
	defer kept.Close()
	check := []limit.Check{{Name: "tls", Key: "kept", Hits: 1, Rule: limit.Rule{Limit: 100, Period: time.Minute}}}
	if _, err := kept.GetRateLimits(context.Background(), check); err != nil {
		t.Fatal(err)
	}
	p.ca.WriteFiles(t, p.dir, "server", certstest.Leaf{Server: true, IPs: []net.IP{net.IPv4(127, 0, 0, 1)}})
	poll.Until(t, 10*time.Second, func() bool { return serverSerial(t, s.grpc, p.client(t, &good)) != before },
		"the renewed certificate is served without a restart")
	if _, err := kept.GetRateLimits(context.Background(), check); err != nil {
		t.Errorf("a connection opened before the renewal failed after it: %v", err)
	}
	if n := metric(goodHTTP, url, "shardlimiter_security_reloads_total", `kind="client_tls"`); n < 1 {
		t.Errorf("shardlimiter_security_reloads_total{kind=client_tls} = %v, want ≥ 1", n)
	}
}

// serverSerial returns the serial number of the certificate addr presents.
func serverSerial(t *testing.T, addr string, cfg *tls.Config) string {
	t.Helper()
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, cfg)
	if err != nil {
		return ""
	}
	defer c.Close()
	return c.ConnectionState().PeerCertificates[0].SerialNumber.String()
}

// TestGubernatorGatewayTLS: gubernator's HTTP gateway (--gubernator-http-addr)
// is under the client TLS as the API is. A client with a valid
// certificate is answered; one without a certificate, with another CA's,
// with an expired one, or in plaintext is refused, each refusal logged and
// counted under the gateway's own listener name.
func TestGubernatorGatewayTLS(t *testing.T) {
	t.Parallel()
	p, good, foreign, expired := clientPKI(t, "gateway-clients")
	gw := freeAddr(t)
	s := serve(t, "--tls-cert-file", p.server.Cert, "--tls-key-file", p.server.Key,
		"--tls-client-ca-file", p.server.CA, "--gubernator-http-addr", gw)

	const body = `{"requests":[{"name":"gw","unique_key":"k","hits":1,"limit":5,"duration":60000}]}`
	post := func(c *http.Client, scheme string) (int, string, error) {
		resp, err := c.Post(scheme+gw+"/v1/GetRateLimits", "application/json", strings.NewReader(body))
		if err != nil {
			return 0, "", err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b), nil
	}
	goodHTTP := httpsClient(p.client(t, &good))
	if code, b, err := post(goodHTTP, "https://"); err != nil || code != 200 || !strings.Contains(b, `"remaining":"4"`) {
		t.Fatalf("gateway over mTLS with a valid certificate: %d %s %v; want 200, remaining 4", code, b, err)
	}
	for _, r := range []struct {
		name   string
		client *http.Client
		scheme string
	}{
		{"no client certificate", httpsClient(p.client(t, nil)), "https://"},
		{"a certificate from another CA", httpsClient(p.client(t, &foreign)), "https://"},
		{"an expired certificate", httpsClient(p.client(t, &expired)), "https://"},
		{"plaintext", &http.Client{Timeout: 5 * time.Second}, "http://"},
	} {
		if code, b, err := post(r.client, r.scheme); err == nil {
			t.Errorf("gateway with %s answered %d %s; want the connection refused", r.name, code, b)
		}
	}
	url := "https://" + s.http
	for _, reason := range []string{"no_certificate", "bad_certificate", "plaintext"} {
		labels := []string{`listener="gubernator-http"`, `reason="` + reason + `"`}
		poll.Until(t, 5*time.Second, func() bool { return metric(goodHTTP, url, "shardlimiter_tls_refused_total", labels...) >= 1 },
			"shardlimiter_tls_refused_total{%s} counts the refusal", strings.Join(labels, ","))
	}
	if n := metric(goodHTTP, url, "shardlimiter_tls_refused_total", `listener="gubernator-http"`, `reason="bad_certificate"`); n < 2 {
		t.Errorf("gateway bad_certificate refusals = %v, want ≥ 2 (another CA, expired)", n)
	}
	if log := s.stderr.String(); !strings.Contains(log, "listener=gubernator-http") {
		t.Errorf("no gateway refusal in the log:\n%s", log)
	}
	// The count is the one the gRPC call sees: one key, whatever the door.
	if code, b, err := post(goodHTTP, "https://"); err != nil || code != 200 || !strings.Contains(b, `"remaining":"3"`) {
		t.Errorf("second gateway call: %d %s %v; want remaining 3 (refused calls spent nothing)", code, b, err)
	}
}
