package gossip

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shardlimiter/shardlimiter/internal/poll"
)

func TestParseSeed(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in, host, port string
		ip             bool
		wantErr        string
	}{
		{in: "10.0.0.1:7000", host: "10.0.0.1", port: "7000", ip: true},
		{in: "10.0.0.1", host: "10.0.0.1", port: "7946", ip: true},
		{in: " limiter.default.svc ", host: "limiter.default.svc", port: "7946"},
		{in: "limiter-0.limiter:8000", host: "limiter-0.limiter", port: "8000"},
		{in: "localhost", host: "localhost", port: "7946"},
		{in: "[fd00::1]:7000", host: "fd00::1", port: "7000", ip: true},
		{in: "[fd00::1]", host: "fd00::1", port: "7946", ip: true},
		{in: "::1", host: "::1", port: "7946", ip: true},
		{in: "", wantErr: "empty"},
		{in: "  ", wantErr: "empty"},
		{in: "host:", wantErr: "port"},
		{in: "host:0", wantErr: "port"},
		{in: "host:65536", wantErr: "port"},
		{in: "host:http", wantErr: "port"},
		{in: ":7946", wantErr: "not an IP address or a DNS name"},
		{in: "[name]:7946", wantErr: "brackets"},
		{in: "[name]", wantErr: "brackets"},
		{in: "a b:7946", wantErr: "not an IP address or a DNS name"},
		{in: "http://seed:7946", wantErr: "too many colons"},
		{in: "-bad-.test", wantErr: "not an IP address or a DNS name"},
		{in: "fd00::1:7000:x", wantErr: "too many colons"},
	}
	for _, tt := range tests {
		got, err := parseSeed(tt.in)
		if tt.wantErr != "" || tt.host == "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("parseSeed(%q) = %+v, %v; want an error containing %q", tt.in, got, err, tt.wantErr)
			}
			continue
		}
		want := seed{host: tt.host, port: tt.port, ip: tt.ip}
		if err != nil || got != want {
			t.Errorf("parseSeed(%q) = %+v, %v; want %+v", tt.in, got, err, want)
		}
	}
}

func TestNewRejectsBadConfig(t *testing.T) {
	t.Parallel()
	ok := Config{NodeName: "n", GRPCAddr: "10.0.0.1:8081"}
	tests := []struct {
		name    string
		edit    func(*Config)
		wantErr string
	}{
		{"no name", func(c *Config) { c.NodeName = "" }, "node name"},
		{"no gRPC address", func(c *Config) { c.GRPCAddr = "" }, "gRPC address"},
		{"gRPC port 0", func(c *Config) { c.GRPCAddr = "h:0" }, "port"},
		{"bind host name", func(c *Config) { c.BindAddr = "example.com:7946" }, "must be an IP"},
		{"bind without port", func(c *Config) { c.BindAddr = "127.0.0.1" }, "bind address"},
		{"advertise bad", func(c *Config) { c.AdvertiseAddr = "a b" }, "advertise"},
		{"advertise port 0", func(c *Config) { c.AdvertiseAddr = "10.0.0.1:0" }, "advertise"},
		{"second seed bad", func(c *Config) { c.Seeds = []string{"ok.test", "bad:port"} }, "seed 2 of 2"},
	}
	for _, tt := range tests {
		cfg := ok
		tt.edit(&cfg)
		if _, err := New(cfg); err == nil || !strings.Contains(err.Error(), tt.wantErr) || !strings.HasPrefix(err.Error(), "gossip: ") {
			t.Errorf("%s: New error = %v, want one starting \"gossip: \" containing %q", tt.name, err, tt.wantErr)
		}
	}
	for _, adv := range []string{"10.0.0.1", "10.0.0.1:7000", "node.test", "node.test:7000", "fd00::1", "[fd00::1]:7000"} {
		cfg := ok
		cfg.AdvertiseAddr = adv
		if _, err := New(cfg); err != nil {
			t.Errorf("AdvertiseAddr %q: New error = %v", adv, err)
		}
	}
}

// fakeDNS answers from a table; a missing name is "no such host".
func fakeDNS(table map[string][]string) func(context.Context, string) ([]string, error) {
	return func(_ context.Context, host string) ([]string, error) {
		if addrs, ok := table[host]; ok {
			return addrs, nil
		}
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}
}

func TestSeedTargets(t *testing.T) {
	t.Parallel()
	m, err := New(Config{
		NodeName: "n",
		GRPCAddr: "10.0.0.1:8081",
		Seeds: []string{
			"one.test:7000",      // name with port
			"bare.test",          // name without port: 7946
			"all.test",           // three pods: three targets
			"[fd00::9]:7001",     // IPv6 literal, no lookup
			"10.0.0.5",           // IPv4 literal, default port
			"down.test",          // not resolvable yet
			"10.0.0.1:7000",      // duplicate of one.test's address
			"[fd00::9]",          // same IP as above, other port
			"lookup-fails.test",  // resolver error
			"empty.test",         // resolves to nothing
			"all.test:7946",      // duplicates all.test
			"weird.test",         // resolves to garbage
			"v6.test:7002",       // AAAA record
			"v6.test",            // same with default port
			"10.0.0.5:7946",      // duplicate of 10.0.0.5
			"ONE.test:7000",      // case differs: resolved separately
			"127.0.0.1",          // loopback literal
			"trailing.dot.test.", // absolute name
		},
		Resolver: fakeDNS(map[string][]string{
			"one.test":          {"10.0.0.1"},
			"ONE.test":          {"10.0.0.1"},
			"bare.test":         {"10.0.0.2"},
			"all.test":          {"10.0.1.1", "10.0.1.2", "10.0.1.3"},
			"empty.test":        {},
			"weird.test":        {"not-an-ip"},
			"v6.test":           {"fd00::20"},
			"trailing.dot.test": {"10.0.0.30"},
		}),
	})
	if err != nil {
		t.Fatal(err)
	}
	got, err := m.seedTargets(context.Background())
	want := []string{
		"10.0.0.1:7000", "10.0.0.2:7946",
		"10.0.1.1:7946", "10.0.1.2:7946", "10.0.1.3:7946",
		"[fd00::9]:7001", "10.0.0.5:7946", "[fd00::9]:7946",
		"[fd00::20]:7002", "[fd00::20]:7946", "127.0.0.1:7946",
	}
	if !slices.Equal(got, want) {
		t.Errorf("seedTargets() =\n%q\nwant\n%q", got, want)
	}
	for _, bad := range []string{"down.test", "lookup-fails.test", "empty.test: no addresses", "not-an-ip", "trailing.dot.test"} {
		if err == nil || !strings.Contains(err.Error(), bad) {
			t.Errorf("seedTargets() error = %v, want it to mention %q", err, bad)
		}
	}
}

var reservedIPs atomic.Int32

// uniqueIP returns a loopback IP no other test uses (Linux routes all of
// 127/8 to lo).
func uniqueIP() string { return fmt.Sprintf("127.0.83.%d", 10+reservedIPs.Add(1)) }

// reserveAddr returns a free host:port on a loopback IP of its own, chosen
// by the kernel (bind port 0) then released, for a node the test must name
// before it starts. Other tests bind 127.0.0.1, so nothing else takes that
// IP and port meanwhile.
func reserveAddr(t *testing.T) string {
	t.Helper()
	ip := uniqueIP()
	l, err := net.Listen("tcp", ip+":0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	port := l.Addr().(*net.TCPAddr).Port
	u, err := net.ListenPacket("udp", net.JoinHostPort(ip, fmt.Sprint(port)))
	if err != nil {
		t.Fatal(err)
	}
	u.Close()
	return l.Addr().String()
}

// A node whose seed is not up keeps trying, logs a few warnings, and joins
// as soon as the seed starts, without a restart.
func TestJoinRetryUntilSeedUp(t *testing.T) {
	t.Parallel()
	seedAddr := reserveAddr(t)
	log, buf := testLogger(t)
	a := startGossip(t, "node-a", "127.0.0.1:0", Config{Seeds: []string{seedAddr}, JoinRetry: 20 * time.Millisecond, Logger: log})
	poll.Until(t, 5*time.Second, func() bool { return a.m.joinAttempts.Load() >= 12 }, "%s", "a few join attempts")
	if a.m.Joined() {
		t.Fatal("Joined() = true while the seed is down")
	}
	warns := strings.Count(buf.String(), `level=WARN msg="join failed, retrying"`)
	if tries := a.m.joinAttempts.Load(); warns < 2 || int64(warns) > (tries+joinWarnEvery-1)/joinWarnEvery+1 {
		t.Errorf("%d warnings for %d failed attempts, want one per %d attempts", warns, tries, joinWarnEvery)
	}

	s := startGossip(t, "node-s", seedAddr, Config{})
	poll.Until(t, 5*time.Second, a.m.Joined, "%s", "a joins the seed once it is up")
	poll.Until(t, 5*time.Second, sees([]*gossipNode{a, s}, membersOf(a, s)), "%s", "both see both")
}

// A seed's DNS name that does not resolve yet (pod start) is retried.
func TestJoinWaitsForDNS(t *testing.T) {
	t.Parallel()
	s := startGossip(t, "node-s", "127.0.0.1:0", Config{})
	_, port, _ := net.SplitHostPort(s.m.LocalAddr())
	var ready atomic.Bool
	resolve := func(_ context.Context, host string) ([]string, error) {
		if host == "limiter.test" && ready.Load() {
			return []string{"127.0.0.1"}, nil
		}
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}
	a := startGossip(t, "node-a", "127.0.0.1:0", Config{Seeds: []string{"limiter.test:" + port}, Resolver: resolve})
	poll.Until(t, 5*time.Second, func() bool { return a.m.joinAttempts.Load() >= 3 }, "%s", "a few join attempts")
	if a.m.Joined() {
		t.Fatal("Joined() = true before the seed name resolves")
	}
	ready.Store(true)
	poll.Until(t, 5*time.Second, sees([]*gossipNode{a, s}, membersOf(a, s)), "%s", "both see both once DNS answers")
}

// A seed list that includes the node itself is harmless: alone, it starts a
// cluster; with another seed, it joins that one.
func TestJoinSeedIsSelf(t *testing.T) {
	t.Parallel()
	aAddr, bAddr := reserveAddr(t), reserveAddr(t)
	a := startGossip(t, "node-a", aAddr, Config{Seeds: []string{aAddr}})
	poll.Until(t, 5*time.Second, a.m.Joined, "%s", "a, its own only seed, starts a cluster")
	if a.m.joinAttempts.Load() != 1 {
		t.Errorf("a joined after %d attempts, want 1", a.m.joinAttempts.Load())
	}
	b := startGossip(t, "node-b", bAddr, Config{Seeds: []string{bAddr, aAddr}})
	poll.Until(t, 5*time.Second, sees([]*gossipNode{a, b}, membersOf(a, b)), "%s", "b joins a")
}

// Two nodes that each started alone (seeds resolving to themselves only) are
// merged by the periodic rejoin once the seeds resolve to both.
func TestJoinRejoinMergesClusters(t *testing.T) {
	t.Parallel()
	aAddr := reserveAddr(t)
	aIP, port, _ := net.SplitHostPort(aAddr)
	bIP := uniqueIP()
	bAddr := net.JoinHostPort(bIP, port) // same port, so one seed "name:port" fits both
	var both atomic.Bool
	dns := func(ip string) func(context.Context, string) ([]string, error) {
		return func(context.Context, string) ([]string, error) {
			if both.Load() {
				return []string{aIP, bIP}, nil
			}
			return []string{ip}, nil
		}
	}
	cfg := Config{Seeds: []string{"limiter.test:" + port}, RejoinInterval: 50 * time.Millisecond}
	cfg.Resolver = dns(aIP)
	a := startGossip(t, "node-a", aAddr, cfg)
	cfg.Resolver = dns(bIP)
	b := startGossip(t, "node-b", bAddr, cfg)
	poll.Until(t, 5*time.Second, func() bool { return a.m.Joined() && b.m.Joined() }, "%s", "each starts alone")
	if len(a.m.Members()) != 1 || len(b.m.Members()) != 1 {
		t.Fatalf("members before the rejoin: %v and %v, want one each", a.m.Members(), b.m.Members())
	}
	both.Store(true)
	poll.Until(t, 5*time.Second, sees([]*gossipNode{a, b}, membersOf(a, b)), "%s", "the rejoin merges them")
}

// AdvertiseAddr may be a DNS name, resolved when Run starts; peers then see
// the advertised IP, also in place of an unspecified gRPC host.
func TestJoinAdvertiseName(t *testing.T) {
	t.Parallel()
	ip := uniqueIP()
	log, _ := testLogger(t)
	m, err := New(Config{
		NodeName: "adv", BindAddr: ip + ":0", AdvertiseAddr: "me.test", GRPCAddr: ":8081", Logger: log,
		Resolver: fakeDNS(map[string][]string{"me.test": {ip}}),
	})
	if err != nil {
		t.Fatal(err)
	}
	a := &gossipNode{name: "adv", m: m, done: make(chan error, 1)}
	ctx, cancel := context.WithCancel(context.Background())
	a.cancel = cancel
	go func() { a.done <- m.Run(ctx) }()
	t.Cleanup(func() { a.stop(t) })
	<-m.Started()
	if got, want := m.selfGossip(), m.LocalAddr(); got != want {
		t.Errorf("advertised gossip address %q, want %q", got, want)
	}
	b := startGossip(t, "node-b", "127.0.0.1:0", Config{Seeds: []string{m.LocalAddr()}})
	a.grpc = net.JoinHostPort(ip, "8081")
	poll.Until(t, 5*time.Second, sees([]*gossipNode{b}, membersOf(a, b)), "%s", "b sees adv at its advertised IP")

	bad, err := New(Config{NodeName: "x", BindAddr: "127.0.0.1:0", AdvertiseAddr: "nowhere.test", GRPCAddr: "h:1",
		Resolver: fakeDNS(nil)})
	if err != nil {
		t.Fatal(err)
	}
	if err := bad.Run(context.Background()); err == nil || !strings.Contains(err.Error(), "nowhere.test") {
		t.Errorf("Run with an unresolvable advertise name = %v, want an error naming it", err)
	}
}
