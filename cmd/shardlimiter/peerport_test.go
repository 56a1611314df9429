package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/shardlimiter/shardlimiter/internal/certs"
	"github.com/shardlimiter/shardlimiter/internal/certs/certstest"
	"github.com/shardlimiter/shardlimiter/internal/poll"
	"github.com/shardlimiter/shardlimiter/limit"
	"github.com/shardlimiter/shardlimiter/transport/dial"
	"github.com/shardlimiter/shardlimiter/transport/pb"
)

func converge(t *testing.T, procs ...*proc) {
	t.Helper()
	poll.Until(t, 20*time.Second, func() bool {
		for _, p := range procs {
			if len(members(p)) != len(procs) {
				return false
			}
		}
		return true
	}, "%d nodes converge", len(procs))
}

func dialAPI(t *testing.T, addr string) *dial.Client {
	t.Helper()
	c, err := dial.Dial(addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// TestPeersOnlyOnThePeerPort runs two real binaries (127.0.0.28-29) with
// unauthenticated peer traffic, as in development. The Peers service is
// not served on the client port, and an attacker calling it on the peer
// port of a node that does not own a key gets "not owner" answers that
// consume nothing: the owner still admits the full limit.
func TestPeersOnlyOnThePeerPort(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real processes")
	}
	t.Parallel()
	bin := buildBinary(t)
	hosts := []string{"127.0.0.28", "127.0.0.29"}
	port := freeGossipPort(t, hosts...)
	seed := net.JoinHostPort(hosts[0], strconv.Itoa(port))
	a := startProc(t, bin, hosts[0], port, seed)
	b := startProc(t, bin, hosts[1], port, seed)
	converge(t, a, b)
	api := dialAPI(t, a.grpc)
	ctx := context.Background()

	// A key that b owns: a peek through a tells its owner.
	rule := limit.Rule{Algorithm: limit.FixedWindow, Limit: 10, Period: time.Hour}
	var key string
	for i := 0; key == ""; i++ {
		k := fmt.Sprint("victim:", i)
		res, err := api.GetRateLimits(ctx, []limit.Check{{Name: "peerport", Key: k, Rule: rule}})
		if err != nil || res[0].Error != "" {
			t.Fatalf("peek: %+v %v", res, err)
		}
		if res[0].Owner == b.name {
			key = k
		}
	}
	forged := []limit.Check{{Name: "peerport", Key: key, Hits: 1, Rule: rule}}

	conn, err := grpc.NewClient(a.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	err = conn.Invoke(ctx, pb.Peers_ForwardRateLimits_FullMethodName, &pb.GetRateLimitsRequest{}, &pb.GetRateLimitsResponse{})
	if status.Code(err) != codes.Unimplemented {
		t.Errorf("Peers on the client port = %v, want Unimplemented", err)
	}

	attacker, err := dial.NewPeerClient(a.peer, dial.PeerConfig{Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer attacker.Close()
	for i := range 3 * rule.Limit {
		res, err := attacker.Forward(ctx, forged)
		if err != nil {
			t.Fatalf("forged forward %d: %v", i, err)
		}
		if r := res[0]; r.Allowed || r.Reason != limit.NotOwner || r.Owner != b.name {
			t.Fatalf("forged forward %d to the non-owner = %+v; want a not-owner error naming %s", i, r, b.name)
		}
	}
	admitted := 0
	for range 2 * rule.Limit {
		res, err := api.GetRateLimits(ctx, forged)
		if err != nil || res[0].Error != "" {
			t.Fatalf("check: %+v %v", res, err)
		}
		if res[0].Allowed {
			admitted++
		}
	}
	if admitted != int(rule.Limit) {
		t.Errorf("after %d forged forwards the owner admitted %d of %d; want the full limit %d", 3*rule.Limit, admitted, 2*rule.Limit, rule.Limit)
	}
}

// TestPeerMTLS runs three real binaries (127.0.0.25-27) with peer mTLS: a
// and b hold certificates of the cluster's CA, c one of another CA (and
// trusts only that). Gossip lets c in, but no forward reaches it: a and b
// refuse its certificate and it refuses theirs. Every check is answered
// meanwhile (its keys fall to the fail policy), the refusals are logged
// and counted on both sides, and a plaintext or certificate-less caller of
// a's peer port is refused.
func TestPeerMTLS(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real processes")
	}
	t.Parallel()
	bin := buildBinary(t)
	hosts := []string{"127.0.0.25", "127.0.0.26", "127.0.0.27"}
	port := freeGossipPort(t, hosts...)
	seed := net.JoinHostPort(hosts[0], strconv.Itoa(port))
	cluster, other := certstest.NewCA(t, "cluster peers"), certstest.NewCA(t, "other")
	dir := t.TempDir()
	peerLeaf := certstest.Leaf{Client: true, Server: true}
	tlsFlags := func(p certstest.Paths) []string {
		return []string{"--peer-tls-cert-file", p.Cert, "--peer-tls-key-file", p.Key, "--peer-tls-ca-file", p.CA, "--log-level", "info"}
	}
	aFiles := cluster.WriteFiles(t, dir, "a", peerLeaf)
	a := startProc(t, bin, hosts[0], port, seed, tlsFlags(aFiles)...)
	b := startProc(t, bin, hosts[1], port, seed, tlsFlags(cluster.WriteFiles(t, dir, "b", peerLeaf))...)
	c := startProc(t, bin, hosts[2], port, seed, tlsFlags(other.WriteFiles(t, dir, "c", peerLeaf))...)
	converge(t, a, b, c)

	api := dialAPI(t, a.grpc)
	var batch []limit.Check
	for i := range 300 {
		batch = append(batch, limit.Check{Name: "mtls", Key: fmt.Sprint("k", i), Hits: 1, Rule: limit.Rule{Limit: 100, Period: time.Hour}})
	}
	owners := map[string]int{}
	for range 3 {
		res, err := api.GetRateLimits(context.Background(), batch)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range res {
			if r.Error != "" {
				t.Fatalf("item error %q; every check must be answered", r.Error)
			}
			owners[r.Owner]++
		}
	}
	if owners[c.name] != 0 || owners[b.name] == 0 {
		t.Errorf("answers by owner %v; want none decided by %s (its certificate is foreign) and some by %s", owners, c.name, b.name)
	}
	forwardsTo := func(p *proc) float64 {
		return metric(http.DefaultClient, "http://"+p.http, "shardlimiter_server_batch_size_items_count", `method="ForwardRateLimits"`)
	}
	if n := forwardsTo(c); n != 0 {
		t.Errorf("%s received %v forwarded batches, want 0", c.name, n)
	}
	poll.Until(t, 5*time.Second, func() bool {
		return metric(http.DefaultClient, "http://"+c.http, "shardlimiter_tls_refused_total", `listener="peer"`) > 0 &&
			metric(http.DefaultClient, "http://"+a.http, "shardlimiter_tls_refused_total", `listener="peer"`) > 0
	}, "both sides count the refused peer handshakes")
	if !strings.Contains(a.stderr.String(), "forward to peer failed") || !strings.Contains(a.stderr.String(), "certificate") {
		t.Errorf("%s's log does not say why forwards to %s fail:\n%s", a.name, c.name, a.stderr)
	}
	if !strings.Contains(c.stderr.String(), "TLS handshake refused") {
		t.Errorf("%s's log does not show the refused handshakes:\n%s", c.name, c.stderr)
	}

	// Callers of a's peer port without a cluster certificate.
	for name, creds := range map[string]credentials.TransportCredentials{
		"plaintext":           insecure.NewCredentials(),
		"another CA's client": credentials.NewTLS(mustStore(t, other.WriteFiles(t, dir, "x", peerLeaf)).ClientConfig()),
	} {
		pc, err := dial.NewPeerClient(a.peer, dial.PeerConfig{Timeout: 5 * time.Second,
			DialOptions: []grpc.DialOption{grpc.WithTransportCredentials(creds)}})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := pc.Forward(context.Background(), batch[:1]); err == nil {
			t.Errorf("a %s call to the peer port was answered; want it refused", name)
		}
		pc.Close()
	}
	member, err := dial.NewPeerClient(a.peer, dial.PeerConfig{Timeout: 5 * time.Second,
		DialOptions: []grpc.DialOption{grpc.WithTransportCredentials(credentials.NewTLS(mustStore(t, aFiles).ClientConfig()))}})
	if err != nil {
		t.Fatal(err)
	}
	defer member.Close()
	if res, err := member.Forward(context.Background(), batch[:1]); err != nil || len(res) != 1 {
		t.Errorf("a member's call to the peer port = %v, %v; want an answer", res, err)
	}
}

func mustStore(t *testing.T, p certstest.Paths) *certs.Store {
	t.Helper()
	s, err := certs.Load(certs.Files{Cert: p.Cert, Key: p.Key, CA: p.CA})
	if err != nil {
		t.Fatal(err)
	}
	return s
}
