package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shardlimiter/shardlimiter/client"
	"github.com/shardlimiter/shardlimiter/internal/certs/certstest"
	"github.com/shardlimiter/shardlimiter/internal/poll"
	"github.com/shardlimiter/shardlimiter/limit"
	"github.com/shardlimiter/shardlimiter/transport"
	"github.com/shardlimiter/shardlimiter/transport/dial"
)

// The client lease tests' child: a client process. childEnv holds the
// targets; the child checks leaseRule's key until it is spent, closes its
// client (giving its leases back) and prints its tally on one line after
// childPrefix.
const (
	childEnv    = "SHARDLIMITER_TEST_LEASE_CLIENT"
	crashEnv    = "SHARDLIMITER_TEST_LEASE_CRASH" // set: exit once a lease is held, giving nothing back
	childPrefix = "LEASE-CLIENT "
	leaseCap    = 30_000
)

// leaseRule refills one hit an hour: nothing in the test's few seconds.
var leaseRule = limit.Rule{Algorithm: limit.TokenBucket, Limit: 1, Period: time.Hour, Burst: leaseCap}

type childTally struct {
	Sent, Admitted int64
	client.LeaseStats
	Err string
}

// TestClientLeaseChild is the client process of
// TestClientLeasesExactAcrossThreeClientProcesses; it does nothing unless
// started by it.
func TestClientLeaseChild(t *testing.T) {
	targets := os.Getenv(childEnv)
	if targets == "" {
		t.Skip("the client process of TestClientLeasesExactAcrossThreeClientProcesses")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	c, err := client.New(ctx, client.Config{Targets: strings.Split(targets, ","), Leases: true, LeaseThreshold: 1})
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	var sent, admitted, streak atomic.Int64
	chk := limit.Check{Name: "lease", Key: "hot", Hits: 1, Rule: leaseRule}
	if os.Getenv(crashEnv) != "" {
		crashHolding(t, c, chk)
	}
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			// Until the key refuses 2,000 checks in a row: spent, as far
			// as this process can tell.
			for streak.Load() < 2000 {
				r, err := c.Check(context.Background(), chk)
				if err != nil {
					t.Error(err)
					return
				}
				sent.Add(1)
				if r.Allowed {
					admitted.Add(1)
					streak.Store(0)
				} else {
					streak.Add(1)
				}
			}
		})
	}
	wg.Wait()
	c.Close()
	out := childTally{Sent: sent.Load(), Admitted: admitted.Load(), LeaseStats: c.LeaseStats()}
	if out.LeaseStats.Err != nil {
		out.Err, out.LeaseStats.Err = out.LeaseStats.Err.Error(), nil
	}
	b, _ := json.Marshal(out)
	fmt.Println(childPrefix + string(b))
}

// crashHolding checks chk until c holds a lease of it, prints its tally
// and exits at once: a crash of a client holding a lease, which nobody
// gives back.
func crashHolding(t *testing.T, c *client.Client, chk limit.Check) {
	var out childTally
	deadline := time.Now().Add(10 * time.Second)
	for c.LeaseStats().Held == 0 && time.Now().Before(deadline) {
		r, err := c.Check(context.Background(), chk)
		if err != nil {
			t.Fatal(err)
		}
		out.Sent++
		if r.Allowed {
			out.Admitted++
		}
	}
	out.LeaseStats = c.LeaseStats()
	b, _ := json.Marshal(out)
	fmt.Println(childPrefix + string(b))
	os.Exit(0)
}

// TestClientLeasesExactAcrossThreeClientProcesses runs three real nodes
// (127.0.0.63-65, --leases --client-leases) and three client processes
// (this test binary again, TestClientLeaseChild), each with
// client.Config.Leases and 8 goroutines checking one hot key until it is
// spent. Before them a fourth client takes a lease of the key and
// crashes (exits without giving it back). The clients decide from leases,
// and the sum admitted across the processes, with what is admitted
// through a node once every lease has ended, is within the key's
// capacity: 0 over. The rest to the capacity is the under-admission the
// leases cost, reported with what the crashed client held (its expected
// share of it). First, a lease asked of a node that does not own the key
// is answered NotOwner, naming the owner, which grants.
func TestClientLeasesExactAcrossThreeClientProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("runs real processes")
	}
	t.Parallel()
	bin := buildBinary(t)
	hosts := []string{"127.0.0.63", "127.0.0.64", "127.0.0.65"}
	port := freeGossipPort(t, hosts...)
	var seeds, targets []string
	for _, h := range hosts {
		seeds = append(seeds, net.JoinHostPort(h, strconv.Itoa(port)))
	}
	var procs []*proc
	for _, h := range hosts {
		p := startProc(t, bin, h, port, strings.Join(seeds, ","), "--leases", "--lease-threshold", "1", "--client-leases")
		procs, targets = append(procs, p), append(targets, p.grpc)
	}
	poll.Until(t, 20*time.Second, func() bool {
		for _, p := range procs {
			if len(members(p)) != 3 {
				return false
			}
		}
		return true
	}, "3 nodes converge")
	notOwnerReroutes(t, procs)

	// The children end once the key is spent; the deadline only keeps a
	// bug from hanging the test.
	childCtx, cancelChildren := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancelChildren()
	crash := exec.CommandContext(childCtx, os.Args[0], "-test.run=^TestClientLeaseChild$", "-test.count=1")
	crash.Env = append(os.Environ(), childEnv+"="+strings.Join(targets, ","), crashEnv+"=1")
	crashOut, err := crash.CombinedOutput()
	crashed, ok := parseTally(string(crashOut))
	if err != nil || !ok || crashed.Held == 0 {
		t.Fatalf("crashing client: %v, %+v\n%s", err, crashed, crashOut)
	}

	children := make([]*exec.Cmd, 3)
	outs := make([]*syncBuffer, 3)
	for i := range children {
		cmd := exec.CommandContext(childCtx, os.Args[0], "-test.run=^TestClientLeaseChild$", "-test.count=1")
		cmd.Env = append(os.Environ(), childEnv+"="+strings.Join(targets, ","))
		outs[i] = &syncBuffer{}
		cmd.Stdout, cmd.Stderr = outs[i], outs[i]
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		children[i] = cmd
	}
	var sum childTally
	for i, cmd := range children {
		err := cmd.Wait()
		tally, ok := parseTally(outs[i].String())
		if err != nil || !ok {
			t.Fatalf("client process %d: %v\n%s", i, err, outs[i])
		}
		t.Logf("client process %d: %+v", i, tally)
		sum.Sent += tally.Sent
		sum.Admitted += tally.Admitted
		sum.Decided += tally.Decided
		sum.Granted += tally.Granted
		sum.Denied += tally.Denied
		sum.Released += tally.Released
	}
	if sum.Granted == 0 || sum.Decided == 0 {
		t.Fatalf("%d grants, %d checks decided from client leases: the test proves nothing", sum.Granted, sum.Decided)
	}
	if sum.Admitted > leaseCap {
		t.Fatalf("the clients admitted %d of a capacity of %d: %d over", sum.Admitted, leaseCap, sum.Admitted-leaseCap)
	}
	hc := &http.Client{Timeout: 5 * time.Second}
	poll.Until(t, 10*time.Second, func() bool {
		s := 0.0
		for _, p := range procs {
			s += metric(hc, "http://"+p.http, "shardlimiter_lease_granted_hits")
		}
		return s == 0
	}, "every lease ends")
	rest := drain(t, procs, limit.Check{Name: "lease", Key: "hot", Hits: 1, Rule: leaseRule})
	total := crashed.Admitted + sum.Admitted + rest
	if total > leaseCap {
		t.Fatalf("admitted %d by the crashed client, %d by the others and %d after: %d over the capacity of %d",
			crashed.Admitted, sum.Admitted, rest, total-leaseCap, leaseCap)
	}
	// A crash costs at most the crashed client's lease (a grant on its
	// way when it exited would add to it: 1% of slack).
	if under := leaseCap - total; under > crashed.Held+leaseCap/100 {
		t.Errorf("%d under the capacity, more than the %d the crashed client held (+1%%)", under, crashed.Held)
	}
	granted := 0.0
	for _, p := range procs {
		granted += metric(hc, "http://"+p.http, "shardlimiter_client_lease_calls_total", `result="granted"`)
	}
	t.Logf("a client admitted %d and crashed holding %d; 3 client processes admitted %d (%d grants, %.0f counted by the nodes; %d deny leases; %d releases; %d of %d checks decided in-process); %d after the leases ended: %d of %d, 0 over, %d under (%.2f%%; the crash's lease: %d)",
		crashed.Admitted, crashed.Held, sum.Admitted, sum.Granted, granted, sum.Denied, sum.Released, sum.Decided, sum.Sent, rest,
		total, leaseCap, leaseCap-total, 100*float64(leaseCap-total)/leaseCap, crashed.Held)
}

func parseTally(out string) (childTally, bool) {
	var tally childTally
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), childPrefix); ok {
			return tally, json.Unmarshal([]byte(v), &tally) == nil
		}
	}
	return tally, false
}

// drain admits what is left of chk's key through every node, and returns
// how much that was.
func drain(t *testing.T, procs []*proc, chk limit.Check) int64 {
	var rest int64
	for _, p := range procs {
		c, err := dial.Dial(p.grpc)
		if err != nil {
			t.Fatal(err)
		}
		for {
			res, err := c.GetRateLimits(context.Background(), []limit.Check{chk})
			if err != nil || !res[0].Allowed {
				break
			}
			rest++
		}
		c.Close()
	}
	return rest
}

// notOwnerReroutes asks every node for a lease of a key: all but its owner
// answer NotOwner naming the owner, and the owner grants; the grant is
// given back.
func notOwnerReroutes(t *testing.T, procs []*proc) {
	t.Helper()
	byName := map[string]*proc{}
	for _, p := range procs {
		byName[p.name] = p
	}
	req := limit.LeaseRequest{From: "probe", Key: "\x05probe" + "k", Rule: leaseRule, Want: 10}
	var owners []string
	for _, p := range procs {
		bc, err := dial.NewBatchClient(p.grpc, dial.PeerConfig{})
		if err != nil {
			t.Fatal(err)
		}
		g, err := bc.Lease(context.Background(), req)
		bc.Close()
		switch {
		case err != nil:
			t.Fatalf("Lease via %s: %v", p.name, err)
		case g.NotOwner != "":
			if byName[g.NotOwner] == nil {
				t.Fatalf("Lease via %s: NotOwner %q, not a node", p.name, g.NotOwner)
			}
			owners = append(owners, g.NotOwner)
		case g.Hits != 10:
			t.Fatalf("Lease of its owner %s = %+v, want 10 hits", p.name, g)
		default:
			owners = append(owners, p.name)
			rel := req
			rel.Want, rel.Release, rel.Leftover = 0, g.ID, g.Hits
			bc, _ := dial.NewBatchClient(p.grpc, dial.PeerConfig{})
			back, err := bc.Lease(context.Background(), rel)
			bc.Close()
			// The owner credits at most what is back to a full bucket
			// (a part of a hit may have refilled meanwhile).
			if err != nil || back.Credited < 9 || back.Credited > 10 {
				t.Fatalf("release to %s = %+v, %v; want 9 or 10 credited", p.name, back, err)
			}
		}
	}
	for _, o := range owners {
		if o != owners[0] {
			t.Fatalf("owners named %v, want one", owners)
		}
	}
}

// TestClientLeasesRefusedWithoutPermission: a node without mTLS or
// --client-leases refuses a client's leases with PermissionDenied, says so
// in a log line and counts it in
// shardlimiter_client_lease_calls_total{result="refused"}; the client's
// checks are still decided, by the node.
func TestClientLeasesRefusedWithoutPermission(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a real process")
	}
	t.Parallel()
	bin := buildBinary(t)
	host := "127.0.0.66"
	p := startProc(t, bin, host, freeGossipPort(t, host), "", "--leases")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := client.New(ctx, client.Config{Targets: []string{p.grpc}, Leases: true, LeaseThreshold: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	chk := limit.Check{Name: "lease", Key: "k", Hits: 1, Rule: limit.Rule{Algorithm: limit.TokenBucket, Limit: 1_000_000, Period: time.Second}}
	poll.Until(t, 10*time.Second, func() bool {
		r, err := c.Check(ctx, chk)
		if err != nil || !r.Allowed {
			t.Fatalf("Check = %+v, %v; want allowed by the node", r, err)
		}
		return c.LeaseStats().Err != nil
	}, "a lease call refused")
	if st := c.LeaseStats(); !errors.Is(st.Err, transport.ErrPermissionDenied) || st.Decided != 0 {
		t.Fatalf("LeaseStats = %+v; want PermissionDenied, nothing decided", st)
	}
	hc := &http.Client{Timeout: 5 * time.Second}
	if n := metric(hc, "http://"+p.http, "shardlimiter_client_lease_calls_total", `result="refused"`); n < 1 {
		t.Errorf("client_lease_calls_total{result=\"refused\"} = %v, want ≥ 1", n)
	}
	poll.Until(t, 5*time.Second, func() bool { return strings.Contains(p.stderr.String(), "client lease refused") },
		"the refusal logged")
}

// TestClientLeasesWithMTLS: a node whose client listener requires client
// certificates (--tls-client-ca-file) lets a client with a verified one
// hold leases without --client-leases: the client decides from them.
func TestClientLeasesWithMTLS(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a real process")
	}
	t.Parallel()
	bin := buildBinary(t)
	host := "127.0.0.67"
	p, good, _, _ := clientPKI(t, "lease-clients")
	srv := p.ca.WriteFiles(t, p.dir, "server67", certstest.Leaf{Server: true, IPs: []net.IP{net.ParseIP(host)}})
	node := startProc(t, bin, host, freeGossipPort(t, host), "", "--leases",
		"--tls-cert-file", srv.Cert, "--tls-key-file", srv.Key, "--tls-client-ca-file", srv.CA)
	tc := p.client(t, &good)
	tc.ServerName = host
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := client.New(ctx, client.Config{Targets: []string{node.grpc}, TLS: tc, Leases: true, LeaseThreshold: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	chk := limit.Check{Name: "lease", Key: "k", Hits: 1, Rule: limit.Rule{Algorithm: limit.TokenBucket, Limit: 1_000_000, Period: time.Second}}
	poll.Until(t, 10*time.Second, func() bool {
		r, err := c.Check(ctx, chk)
		if err != nil || !r.Allowed {
			t.Fatalf("Check = %+v, %v; want allowed", r, err)
		}
		return c.LeaseStats().Decided > 0
	}, "checks decided from a lease under mTLS")
	if st := c.LeaseStats(); st.Granted == 0 || st.Err != nil {
		t.Errorf("LeaseStats = %+v; want grants and no error", st)
	}
}
