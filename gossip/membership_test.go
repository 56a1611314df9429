package gossip

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shardlimiter/shardlimiter/internal/poll"

	"github.com/hashicorp/memberlist"
	"go.uber.org/goleak"

	"github.com/shardlimiter/shardlimiter/ring"
)

// TestMain checks, after all tests of the package, that none left a
// goroutine behind. No stack is ignored, but memberlist gets a grace period:
// its Shutdown does not wait for its probe loop, and a probe in flight
// returns only when its ack timer fires, one probe interval later (0.5 s;
// up to 8× when memberlist thinks itself degraded). A real leak, a
// memberlist never shut down or a join loop that does not stop, outlasts it.
func TestMain(m *testing.M) {
	code := m.Run()
	if code == 0 {
		var leak mainTB
		var err error
		poll.Until(&leak, 5*time.Second, func() bool { err = goleak.Find(); return err == nil }, "%s", "memberlist's goroutines exit")
		if leak.failed {
			fmt.Fprintf(os.Stderr, "goleak: goroutines left after the tests: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

// mainTB lets TestMain, which has no *testing.T, wait with poll.Until.
type mainTB struct{ failed bool }

func (*mainTB) Helper()                  {}
func (tb *mainTB) Fatalf(string, ...any) { tb.failed = true }

// logBuf collects a test's log lines; they are printed if the test fails.
// Writes may come after the test ends (memberlist's goroutines wind down).
type logBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func testLogger(t *testing.T) (*slog.Logger, *logBuf) {
	buf := &logBuf{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("logs:\n%s", buf)
		}
	})
	return slog.New(slog.NewTextHandler(buf, &slog.HandlerOptions{Level: slog.LevelDebug})), buf
}

// gossipNode is a running Membership of a test.
type gossipNode struct {
	name, grpc string
	m          *Membership
	cancel     context.CancelFunc
	done       chan error
	stopped    atomic.Bool
}

// stop cancels Run and waits for it; Leave is not called.
func (g *gossipNode) stop(t *testing.T) {
	t.Helper()
	if g.stopped.Swap(true) {
		return
	}
	g.cancel()
	if err := <-g.done; err != nil {
		t.Errorf("%s: Run() = %v", g.name, err)
	}
}

var grpcPorts atomic.Int32

// startGossip starts a Membership named name bound to bind (port 0 unless
// the test reserved one) and waits until memberlist is up. It is stopped
// when the test ends.
func startGossip(t *testing.T, name, bind string, cfg Config) *gossipNode {
	t.Helper()
	return startGossipWith(t, name, bind, cfg, nil)
}

// startGossipWith is startGossip with setup called on the Membership
// before Run (nil: none).
func startGossipWith(t *testing.T, name, bind string, cfg Config, setup func(*Membership)) *gossipNode {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger, _ = testLogger(t)
	}
	g := &gossipNode{name: name, grpc: fmt.Sprintf("10.9.0.1:%d", 10000+grpcPorts.Add(1)), done: make(chan error, 1)}
	cfg.NodeName, cfg.BindAddr, cfg.GRPCAddr = name, bind, g.grpc
	if cfg.JoinRetry == 0 {
		cfg.JoinRetry = 100 * time.Millisecond
	}
	m, err := New(cfg)
	if err != nil {
		t.Fatalf("New(%s): %v", name, err)
	}
	g.m = m
	if setup != nil {
		setup(m)
	}
	ctx, cancel := context.WithCancel(context.Background())
	g.cancel = cancel
	go func() { g.done <- m.Run(ctx) }()
	t.Cleanup(func() { g.stop(t) })
	select {
	case <-m.Started():
	case err := <-g.done:
		g.stopped.Store(true)
		t.Fatalf("%s: Run() = %v before starting", name, err)
	}
	return g
}

func memberNames(ms []ring.Member) []string {
	var out []string
	for _, m := range ms {
		out = append(out, m.Name)
	}
	return out
}

// sees reports whether every node of from sees exactly want.
func sees(from []*gossipNode, want []ring.Member) func() bool {
	return func() bool {
		for _, g := range from {
			if !slices.Equal(g.m.Members(), want) {
				return false
			}
		}
		return true
	}
}

func membersOf(nodes ...*gossipNode) []ring.Member {
	var out []ring.Member
	for _, g := range nodes {
		out = append(out, ring.Member{Name: g.name, Addr: g.grpc, PeerAddr: g.grpc})
	}
	slices.SortFunc(out, func(a, b ring.Member) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// startCluster starts n nodes on 127.0.0.1, each on its own port, the
// others seeded with the first, and waits until all see all.
func startCluster(t *testing.T, n int) []*gossipNode {
	t.Helper()
	var nodes []*gossipNode
	for i := range n {
		var cfg Config
		if i > 0 {
			cfg.Seeds = []string{nodes[0].m.LocalAddr()}
		}
		nodes = append(nodes, startGossip(t, fmt.Sprintf("node-%c", 'a'+i), "127.0.0.1:0", cfg))
	}
	poll.Until(t, 10*time.Second, sees(nodes, membersOf(nodes...)), "%s", fmt.Sprintf("%d nodes converge", n))
	return nodes
}

func TestMembershipConvergesOnOneIP(t *testing.T) {
	t.Parallel()
	nodes := startCluster(t, 3)
	ports := map[string]bool{}
	for _, g := range nodes {
		host, port, err := net.SplitHostPort(g.m.LocalAddr())
		if err != nil || host != "127.0.0.1" || port == "0" {
			t.Errorf("%s: LocalAddr() = %q, want 127.0.0.1 and a real port", g.name, g.m.LocalAddr())
		}
		ports[port] = true
		if !g.m.Joined() {
			t.Errorf("%s: Joined() = false after converging", g.name)
		}
		select {
		case <-g.m.Changed():
		default:
			t.Errorf("%s: Changed() not signalled after members joined", g.name)
		}
	}
	if len(ports) != 3 {
		t.Errorf("gossip ports %v: want 3 distinct ports on one IP", ports)
	}
	names := memberNames(nodes[0].m.Members())
	if len(slices.Compact(slices.Clone(names))) != 3 {
		t.Errorf("Members() names %v, want 3 distinct", names)
	}
}

func TestMembershipLeave(t *testing.T) {
	t.Parallel()
	nodes := startCluster(t, 3)
	a, b, c := nodes[0], nodes[1], nodes[2]
	select {
	case <-a.m.Changed(): // drain: the joins were signalled
	default:
	}
	start := time.Now()
	if err := c.m.Leave(2 * time.Second); err != nil {
		t.Fatalf("Leave() = %v", err)
	}
	returned := time.Since(start)
	poll.Until(t, 3*time.Second, sees([]*gossipNode{a, b}, membersOf(a, b)), "%s", "a and b drop c after its Leave")
	t.Logf("graceful leave: both peers dropped the node %v after Leave was called (Leave returned after %v)", time.Since(start), returned)
	select {
	case <-a.m.Changed():
	default:
		t.Error("a: Changed() not signalled after c left")
	}
	if err := c.m.Leave(time.Second); err != nil {
		t.Errorf("second Leave() = %v, want nil", err)
	}
	if got := c.m.Members(); slices.Contains(memberNames(got), c.name) {
		t.Errorf("after Leave, c.Members() = %v, want c absent", got)
	}
	c.stop(t)
	if err := c.m.Leave(time.Second); err != nil {
		t.Errorf("Leave() after Run returned = %v, want nil", err)
	}
}

// TestMembershipAllLeave: every member leaves at once, as when a whole
// cluster is stopped. Each broadcast may have nobody left to hear it: Leave
// returns nil once no other member is left, long before its timeout, and a
// node that has left rejoins no seed afterwards.
func TestMembershipAllLeave(t *testing.T) {
	t.Parallel()
	nodes := startCluster(t, 3)
	// memberlist's own wait runs out its timeout in the background (Run's
	// shutdown waits for it), so the timeout is kept short; Leave must
	// return well before it.
	const timeout = 8 * time.Second
	start := time.Now()
	errs := make(chan error, len(nodes))
	for _, g := range nodes {
		go func() { errs <- g.m.Leave(timeout) }()
	}
	for range nodes {
		select {
		case err := <-errs:
			if err != nil {
				t.Errorf("Leave() = %v, want nil: nobody was left to tell", err)
			}
		case <-time.After(timeout * 3 / 4):
			t.Fatalf("Leave() still waiting after %v of its %v timeout, with every other member gone", timeout*3/4, timeout)
		}
	}
	t.Logf("three simultaneous leaves returned after %v", time.Since(start))
	for _, g := range nodes {
		if !g.m.leaving.Load() {
			t.Errorf("%s: not marked as having left: it would rejoin its seeds", g.name)
		}
	}
}

func TestMembershipCrashDetected(t *testing.T) {
	t.Parallel()
	for _, n := range []int{3, 5} {
		t.Run(fmt.Sprint(n, "nodes"), func(t *testing.T) {
			t.Parallel()
			nodes := startCluster(t, n)
			survivors, crashed := nodes[:n-1], nodes[n-1]
			start := time.Now()
			crashed.stop(t) // memberlist Shutdown, no Leave: sockets close
			stopped := time.Since(start)
			poll.Until(t, 10*time.Second, sees(survivors, membersOf(survivors...)), "%s", "survivors drop the crashed node")
			t.Logf("crash with %d nodes: all survivors dropped the node %v after the crash (Run took %v to stop)", n, time.Since(start), stopped)
		})
	}
}

// A node crashes and comes back at once under the same name, with a new
// gossip port and gRPC address, before the others have noticed the crash.
func TestMembershipRestartSameName(t *testing.T) {
	t.Parallel()
	nodes := startCluster(t, 3)
	a, b, c := nodes[0], nodes[1], nodes[2]
	start := time.Now()
	c.stop(t)
	c2 := startGossip(t, c.name, "127.0.0.1:0", Config{Seeds: []string{a.m.LocalAddr()}})
	if c2.grpc == c.grpc || c2.m.LocalAddr() == c.m.LocalAddr() {
		t.Fatalf("restart reused an address: %s/%s", c2.grpc, c2.m.LocalAddr())
	}
	took := poll.Until(t, 20*time.Second, sees([]*gossipNode{a, b, c2}, membersOf(a, b, c2)), "%s", "all see the restarted node's new gRPC address")
	t.Logf("restart under the same name at a new address: all saw the new address %v after the crash (%v after the restart)", time.Since(start), took)
}

func TestMembershipMembersBeforeRun(t *testing.T) {
	t.Parallel()
	m, err := New(Config{NodeName: "solo", GRPCAddr: ":8081", Seeds: []string{"seed.test"}})
	if err != nil {
		t.Fatal(err)
	}
	want := []ring.Member{{Name: "solo", Addr: ":8081", PeerAddr: ":8081"}}
	if got := m.Members(); !slices.Equal(got, want) {
		t.Errorf("Members() before Run = %v, want %v", got, want)
	}
	if m.Joined() || m.LocalAddr() != "" {
		t.Errorf("before Run: Joined() = %v, LocalAddr() = %q; want false, empty", m.Joined(), m.LocalAddr())
	}
	if err := m.Leave(time.Second); err != nil {
		t.Errorf("Leave() before Run = %v, want nil", err)
	}
	select {
	case <-m.Started():
		t.Error("Started() closed before Run")
	default:
	}
}

// A single node with no seeds is joined at once; its unspecified gRPC host
// is filled with its gossip IP.
func TestMembershipNoSeeds(t *testing.T) {
	t.Parallel()
	log, _ := testLogger(t)
	m, err := New(Config{NodeName: "solo", BindAddr: "127.0.0.1:0", GRPCAddr: ":8081", Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	<-m.Started()
	if !m.Joined() {
		t.Error("Joined() = false with no seeds")
	}
	want := []ring.Member{{Name: "solo", Addr: "127.0.0.1:8081", PeerAddr: "127.0.0.1:8081"}}
	poll.Until(t, 2*time.Second, func() bool { return slices.Equal(m.Members(), want) }, "%s", "solo sees itself")
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run() = %v", err)
	}
}

// garbageMeta is a memberlist delegate publishing metadata no version of
// Meta can read.
type garbageMeta struct{ hooks }

func (garbageMeta) NodeMeta(int) []byte { return []byte{0xee, 1, 2} }

func TestMembershipSkipsUndecodableMeta(t *testing.T) {
	t.Parallel()
	log, buf := testLogger(t)
	a := startGossip(t, "node-a", "127.0.0.1:0", Config{Logger: log})

	conf := memberlist.DefaultLocalConfig()
	conf.Name, conf.BindAddr, conf.BindPort = "alien", "127.0.0.1", 0
	conf.Delegate = &garbageMeta{}
	conf.Logger = gossipLogger(slog.New(slog.DiscardHandler), nil, nil)
	alien, err := memberlist.Create(conf)
	if err != nil {
		t.Fatal(err)
	}
	defer alien.Shutdown()
	if _, err := alien.Join([]string{a.m.LocalAddr()}); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 5*time.Second, func() bool { return strings.Contains(a.m.memberDump(), "alien") }, "%s", "a hears of alien")
	for range 3 {
		if got := a.m.Members(); !slices.Equal(got, membersOf(a)) {
			t.Errorf("Members() = %v, want only node-a (alien's metadata is undecodable)", got)
		}
	}
	if n := strings.Count(buf.String(), "undecodable metadata"); n != 1 {
		t.Errorf("undecodable metadata logged %d times over 3 Members() calls, want 1", n)
	}
}

// memberDump lists the names Membership tracks, decodable or not.
func (m *Membership) memberDump() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	var names []string
	for name := range m.members {
		names = append(names, name)
	}
	return strings.Join(names, ",")
}

func TestMembershipLogLevels(t *testing.T) {
	t.Parallel()
	buf := &logBuf{}
	refuted := 0
	l := gossipLogger(slog.New(slog.NewTextHandler(buf, &slog.HandlerOptions{
		Level:       slog.LevelDebug,
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr { return dropTime(a) },
	})), nil, func() { refuted++ })
	l.Printf("[DEBUG] memberlist: Stream connection from=127.0.0.1:1")
	l.Printf("[INFO] memberlist: Marking b as failed")
	l.Printf("[WARN] memberlist: Refuting a suspect message")
	l.Printf("[WARN] memberlist: Refuting a dead message (from: b)")
	l.Printf("[ERR] memberlist: Conflicting address for b")
	l.Printf("[ERR] Failed to shutdown transport: x")
	l.Printf("no tag")
	want := `level=DEBUG msg="Stream connection from=127.0.0.1:1"
level=INFO msg="Marking b as failed"
level=WARN msg="Refuting a suspect message"
level=INFO msg="Refuting a dead message (from: b)"
level=ERROR msg="Conflicting address for b"
level=ERROR msg="Failed to shutdown transport: x"
level=INFO msg="no tag"
`
	if got := buf.String(); got != want {
		t.Errorf("gossip log lines:\n%s\nwant:\n%s", got, want)
	}
	if refuted != 1 {
		t.Errorf("refutations of this node's death noted: %d, want 1 (a suspicion refuted is not one)", refuted)
	}
}

func dropTime(a slog.Attr) slog.Attr {
	if a.Key == slog.TimeKey {
		return slog.Attr{}
	}
	return a
}

// TestMembershipRunStops is not parallel: it checks that no goroutine is
// left once Run returns, which other tests running alongside would blur.
func TestMembershipRunStops(t *testing.T) {
	before := goleak.IgnoreCurrent()
	log, _ := testLogger(t)
	var nodes []*Membership
	var cancels []context.CancelFunc
	var dones []chan error
	for i := range 2 {
		cfg := Config{NodeName: fmt.Sprint("n", i), BindAddr: "127.0.0.1:0", GRPCAddr: "127.0.0.1:8081", Logger: log, JoinRetry: 50 * time.Millisecond}
		if i > 0 {
			cfg.Seeds = []string{nodes[0].LocalAddr(), "unreachable.test"}
			cfg.Resolver = func(context.Context, string) ([]string, error) {
				return nil, &net.DNSError{Err: "no such host", IsNotFound: true}
			}
		}
		m, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- m.Run(ctx) }()
		<-m.Started()
		nodes, cancels, dones = append(nodes, m), append(cancels, cancel), append(dones, done)
	}
	poll.Until(t, 5*time.Second, func() bool { return nodes[1].Joined() && len(nodes[0].Members()) == 2 }, "%s", "n1 joins n0")
	if err := nodes[0].Run(context.Background()); err == nil {
		t.Error("second Run() = nil, want an error")
	}
	for i := range nodes {
		cancels[i]()
		if err := <-dones[i]; err != nil {
			t.Errorf("Run() = %v", err)
		}
	}
	poll.Until(t, 5*time.Second, func() bool { return goleak.Find(before) == nil }, "%s", "no goroutine left after Run returned")
	goleak.VerifyNone(t, before)

	m, _ := New(Config{NodeName: "x", GRPCAddr: "h:1"})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := m.Run(ctx); err != nil || m.LocalAddr() != "" {
		t.Errorf("Run(cancelled ctx) = %v, LocalAddr %q; want nil at once, nothing bound", err, m.LocalAddr())
	}
}

// TestMembershipJoinedSignalsChanged: Changed is signalled once Joined is
// true, so that a watcher of readiness needs no timer. The members a join
// brings are signalled before the join is recorded; without a signal of
// its own, a watcher that took those saw Joined false and nothing after.
func TestMembershipJoinedSignalsChanged(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		contact contactFunc
	}{
		{"a seed answered", func(context.Context, []string) (int, int, error) { return 1, 1, nil }},
		{"the seeds are this node", func(context.Context, []string) (int, int, error) { return 0, 0, nil }},
	} {
		m, err := New(Config{NodeName: "node-b", BindAddr: "127.0.0.1:0", GRPCAddr: "10.9.0.1:1", Seeds: []string{"127.0.0.1:1"}})
		if err != nil {
			t.Fatal(err)
		}
		select {
		case <-m.Changed():
			t.Fatalf("%s: Changed signalled before the join", tc.name)
		default:
		}
		if !m.joinSeeds(context.Background(), tc.contact) || !m.Joined() {
			t.Fatalf("%s: joinSeeds failed or Joined() = false", tc.name)
		}
		select {
		case <-m.Changed():
		default:
			t.Errorf("%s: Joined() turned true without a Changed signal", tc.name)
		}
	}
}
