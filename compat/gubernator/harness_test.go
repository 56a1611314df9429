package gubernatorcompat

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	guber "github.com/gubernator-io/gubernator/v2"
)

// The binary is built once per test run from the main module (the parent
// of this module's parent).
var (
	buildOnce sync.Once
	buildDir  string
	buildBin  string
	buildErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if buildDir != "" {
		os.RemoveAll(buildDir)
	}
	os.Exit(code)
}

// binary returns the built shardlimiter binary; it skips the test only
// when the go command is missing.
func binary(t *testing.T) string {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("go not on PATH: cannot build cmd/shardlimiter")
	}
	buildOnce.Do(func() {
		if buildDir, buildErr = os.MkdirTemp("", "shardlimiter-gubernator-test-"); buildErr != nil {
			return
		}
		buildBin = filepath.Join(buildDir, "shardlimiter")
		root, err := filepath.Abs("../..")
		if err != nil {
			buildErr = err
			return
		}
		cmd := exec.Command(goBin, "build", "-o", buildBin, "./cmd/shardlimiter")
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build ./cmd/shardlimiter: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return buildBin
}

// node is one running shardlimiter process.
type node struct {
	name     string
	grpc     string // client gRPC address: pb.gubernator.V1
	http     string // shardlimiter's HTTP API (/v1/cluster, /metrics)
	gubHTTP  string // gubernator's gateway
	cmd      *exec.Cmd
	stderr   *syncBuffer
	client   guber.V1Client
	stopped  bool
	gossipAt string
}

type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// freePort returns a loopback TCP and UDP port free now (gossip binds
// both, so it cannot take :0).
func freePort(t *testing.T) int {
	t.Helper()
	for range 50 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		u, err := net.ListenPacket("udp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		l.Close()
		if err == nil {
			u.Close()
			return port
		}
	}
	t.Fatal("no free gossip port")
	return 0
}

// start runs a node named name on loopback, joined to join (a gossip
// address, "" for none), and returns once it prints its serving line.
func start(t *testing.T, name, join string, extra ...string) *node {
	t.Helper()
	n := &node{name: name, stderr: &syncBuffer{}, gossipAt: net.JoinHostPort("127.0.0.1", strconv.Itoa(freePort(t)))}
	n.cmd = exec.Command(binary(t), append([]string{
		"--http-addr", "127.0.0.1:0", "--grpc-addr", "127.0.0.1:0", "--peer-addr", "127.0.0.1:0",
		"--gubernator-http-addr", "127.0.0.1:0", "--gossip-addr", n.gossipAt, "--node-name", name,
		"--join", join, "--log-level", "warn", "--shutdown-grace", "0s"}, extra...)...)
	n.cmd.Stderr = n.stderr
	stdout, err := n.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := n.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		n.cmd.Process.Kill()
		n.cmd.Wait()
		if t.Failed() {
			t.Logf("%s stderr:\n%s", name, n.stderr)
		}
	})
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatalf("%s: no serving line: %v\n%s", name, err, n.stderr)
	}
	for _, f := range strings.Fields(line) {
		for prefix, dst := range map[string]*string{"grpc=": &n.grpc, "http=": &n.http, "gubernator_http=": &n.gubHTTP} {
			if v, ok := strings.CutPrefix(f, prefix); ok {
				*dst = v
			}
		}
	}
	if n.grpc == "" || n.gubHTTP == "" {
		t.Fatalf("%s: serving line %q lacks grpc= or gubernator_http=", name, line)
	}
	// gubernator's own client, as its users dial it
	if n.client, err = guber.DialV1Server(n.grpc, nil); err != nil {
		t.Fatal(err)
	}
	return n
}

// stop sends SIGTERM (a graceful leave) and waits for the exit.
func (n *node) stop(t *testing.T) {
	t.Helper()
	if err := n.cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	if err := n.cmd.Wait(); err != nil {
		var ee *exec.ExitError
		if !errors.As(err, &ee) {
			t.Fatal(err)
		}
	}
	n.stopped = true
}

// eventually polls cond until it holds or d has passed.
func eventually(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %s", d, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// ctx is a test context bounded so that a bug fails instead of hanging.
func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return c
}

// get sends one request and returns its answer.
func get(t *testing.T, c guber.V1Client, r *guber.RateLimitReq) *guber.RateLimitResp {
	t.Helper()
	resp, err := c.GetRateLimits(ctx(t), &guber.GetRateLimitsReq{Requests: []*guber.RateLimitReq{r}})
	if err != nil {
		t.Fatalf("GetRateLimits(%v) = %v", r, err)
	}
	if len(resp.Responses) != 1 {
		t.Fatalf("GetRateLimits(%v): %d answers", r, len(resp.Responses))
	}
	return resp.Responses[0]
}

// step is one call of a ported sequence and the answer gubernator gives.
type step struct {
	name      string
	hits      int64
	remaining int64
	status    guber.Status
	// advance moves the test's clock after the call (created_at of the
	// following calls), where gubernator's test advances its frozen clock.
	advance time.Duration
}

// at returns a pointer to ms, for created_at.
func at(ms int64) *int64 { return &ms }
