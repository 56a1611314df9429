package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Deadlines of the local cluster's start.
const (
	startTimeout   = 20 * time.Second // a node's serving line and /readyz
	convergeWithin = 20 * time.Second // every node sees every member
	stopGrace      = 5 * time.Second  // SIGTERM to SIGKILL
	pollEvery      = 20 * time.Millisecond
	startAttempts  = 3 // a node whose gossip port was taken meanwhile is retried
)

// httpClient polls the local nodes; its timeout keeps a stuck node from
// hanging the start.
var httpClient = &http.Client{Timeout: 2 * time.Second}

// errExited reports a local node that exited while starting.
var errExited = errors.New("exited")

// localCluster is N shardlimiter processes on 127.0.0.1, each in its own
// process group, stopped together by stop.
type localCluster struct {
	cancel context.CancelFunc // kills every process (SIGTERM, then SIGKILL)
	dir    string
	nodes  []*localNode
	once   sync.Once
}

// localNode is one server process.
type localNode struct {
	name, http, grpc, gossip string
	cmd                      *exec.Cmd
	serving                  chan string   // the "serving …" line
	exited                   chan struct{} // closed once the process is reaped
	stderr                   *tail
}

// startLocal builds the server (unless bin is given) and starts n nodes:
// the first as seed, the others joining it; it returns once every node
// sees n members. On error everything started is stopped.
func startLocal(ctx context.Context, n int, bin string, extra []string, log io.Writer) (_ *localCluster, err error) {
	cctx, cancel := context.WithCancel(ctx)
	c := &localCluster{cancel: cancel}
	defer func() {
		if err != nil {
			c.stop()
		}
	}()
	if c.dir, err = os.MkdirTemp("", "shardlimiter-loadtest-"); err != nil {
		return nil, err
	}
	if bin == "" {
		fmt.Fprintln(log, "loadtest: building ./cmd/shardlimiter")
		if bin, err = buildServer(cctx, c.dir); err != nil {
			return nil, err
		}
	}
	for i := range n {
		var join string
		if i > 0 {
			join = c.nodes[0].gossip
		}
		nd, err := startNode(cctx, bin, fmt.Sprintf("loadtest-%d", i+1), join, extra)
		if err != nil {
			return nil, err
		}
		c.nodes = append(c.nodes, nd)
		fmt.Fprintf(log, "loadtest: started %s grpc=%s http=%s gossip=%s\n", nd.name, nd.grpc, nd.http, nd.gossip)
	}
	if err := c.converge(cctx, n); err != nil {
		return nil, err
	}
	return c, nil
}

// stop kills every node and waits for them; it is idempotent.
func (c *localCluster) stop() {
	c.once.Do(func() {
		c.cancel()
		for _, nd := range c.nodes {
			<-nd.exited
		}
		if c.dir != "" {
			os.RemoveAll(c.dir)
		}
	})
}

func (c *localCluster) grpcAddrs() (out []string) {
	for _, nd := range c.nodes {
		out = append(out, nd.grpc)
	}
	return out
}

func (c *localCluster) httpAddrs() (out []string) {
	for _, nd := range c.nodes {
		out = append(out, nd.http)
	}
	return out
}

// modulePath is the module whose server --local builds.
const modulePath = "github.com/shardlimiter/shardlimiter"

// buildServer builds ./cmd/shardlimiter of the module around the current
// directory into dir.
func buildServer(ctx context.Context, dir string) (string, error) {
	out, err := exec.CommandContext(ctx, "go", "env", "GOMOD").Output()
	gomod := strings.TrimSpace(string(out))
	if err != nil || gomod == "" || gomod == os.DevNull {
		return "", errors.New("--local builds ./cmd/shardlimiter: run inside the shardlimiter module, or give --server-bin")
	}
	if mod, err := os.ReadFile(gomod); err != nil || !bytes.Contains(mod, []byte("module "+modulePath+"\n")) {
		return "", fmt.Errorf("--local builds ./cmd/shardlimiter: %s is not the %s module; run inside it, or give --server-bin", gomod, modulePath)
	}
	bin := filepath.Join(dir, "shardlimiter")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/shardlimiter")
	cmd.Dir = filepath.Dir(gomod)
	setProcessGroup(cmd) // a cancelled build takes its compilers along
	if msg, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/shardlimiter: %w\n%s", err, msg)
	}
	return bin, nil
}

// startNode starts one node and waits until it is ready. A node that exits
// while starting (its probed gossip port taken meanwhile) is retried on
// another port.
func startNode(ctx context.Context, bin, name, join string, extra []string) (*localNode, error) {
	var err error
	for range startAttempts {
		var port int
		if port, err = freeGossipPort(); err != nil {
			return nil, err
		}
		args := []string{"--http-addr=127.0.0.1:0", "--grpc-addr=127.0.0.1:0",
			"--gossip-addr=127.0.0.1:" + strconv.Itoa(port), "--node-name=" + name,
			"--log-level=warn", "--shutdown-grace=0s"}
		if join != "" {
			args = append(args, "--join="+join)
		}
		var nd *localNode
		if nd, err = spawn(ctx, bin, append(args, extra...)); err != nil {
			return nil, err
		}
		nd.name, nd.gossip = name, "127.0.0.1:"+strconv.Itoa(port)
		if err = nd.waitReady(ctx); err == nil {
			return nd, nil
		}
		nd.cmd.Cancel()
		<-nd.exited
		if !errors.Is(err, errExited) {
			return nil, err
		}
	}
	return nil, err
}

// spawn starts bin in its own process group; ctx's end terminates it.
func spawn(ctx context.Context, bin string, args []string) (*localNode, error) {
	nd := &localNode{serving: make(chan string, 1), exited: make(chan struct{}), stderr: &tail{}}
	nd.cmd = exec.CommandContext(ctx, bin, args...)
	setProcessGroup(nd.cmd)
	nd.cmd.WaitDelay = stopGrace
	nd.cmd.Stdout = &lineWatch{prefix: "serving ", found: nd.serving}
	nd.cmd.Stderr = nd.stderr
	if err := nd.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	go func() {
		nd.cmd.Wait()
		close(nd.exited)
	}()
	return nd, nil
}

// waitReady waits for the serving line, then for /readyz to answer 200.
func (nd *localNode) waitReady(ctx context.Context) error {
	deadline := time.NewTimer(startTimeout)
	defer deadline.Stop()
	select {
	case line := <-nd.serving:
		nd.http, nd.grpc = field(line, "http="), field(line, "grpc=")
	case <-nd.exited:
		return fmt.Errorf("%s %w before serving: %s", nd.name, errExited, nd.stderr)
	case <-deadline.C:
		return fmt.Errorf("%s printed no serving line within %v: %s", nd.name, startTimeout, nd.stderr)
	case <-ctx.Done():
		return ctx.Err()
	}
	return poll(ctx, nd, startTimeout, "ready", func() bool {
		resp, err := httpClient.Get("http://" + nd.http + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
}

// converge waits until every node's /v1/cluster lists n members.
func (c *localCluster) converge(ctx context.Context, n int) error {
	for _, nd := range c.nodes {
		err := poll(ctx, nd, convergeWithin, fmt.Sprintf("seeing %d members", n), func() bool {
			return members(nd.http) == n
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// poll calls cond every pollEvery until it holds, nd exits, ctx ends or
// within passes.
func poll(ctx context.Context, nd *localNode, within time.Duration, what string, cond func() bool) error {
	deadline := time.Now().Add(within)
	tick := time.NewTicker(pollEvery)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not %s within %v: %s", nd.name, what, within, nd.stderr)
		}
		select {
		case <-nd.exited:
			return fmt.Errorf("%s %w while starting: %s", nd.name, errExited, nd.stderr)
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
	return nil
}

// members returns how many members the node at httpAddr lists, or -1.
func members(httpAddr string) int {
	resp, err := httpClient.Get("http://" + httpAddr + "/v1/cluster")
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	var info struct {
		Members []json.RawMessage `json:"members"`
	}
	if json.NewDecoder(resp.Body).Decode(&info) != nil {
		return -1
	}
	return len(info.Members)
}

// freeGossipPort returns a loopback port that was free for both TCP and
// UDP a moment ago (memberlist binds both).
func freeGossipPort() (int, error) {
	for range 20 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, err
		}
		port := l.Addr().(*net.TCPAddr).Port
		u, err := net.ListenPacket("udp", "127.0.0.1:"+strconv.Itoa(port))
		l.Close()
		if err == nil {
			u.Close()
			return port, nil
		}
	}
	return 0, errors.New("no loopback port free for both TCP and UDP")
}

// field returns the value of "key…" in a line of space-separated fields.
func field(line, key string) string {
	for _, f := range strings.Fields(line) {
		if v, ok := strings.CutPrefix(f, key); ok {
			return v
		}
	}
	return ""
}

// lineWatch is a process's stdout: it sends the first line starting with
// prefix on found and discards the rest.
type lineWatch struct {
	prefix string
	found  chan<- string
	buf    []byte
	done   bool
}

func (w *lineWatch) Write(p []byte) (int, error) {
	if w.done {
		return len(p), nil
	}
	w.buf = append(w.buf, p...)
	for {
		i := bytes.IndexByte(w.buf, '\n')
		if i < 0 {
			break
		}
		line := string(w.buf[:i])
		w.buf = w.buf[i+1:]
		if strings.HasPrefix(line, w.prefix) {
			w.found <- line
			w.done, w.buf = true, nil
			break
		}
	}
	if len(w.buf) > maxLine {
		w.buf = nil // a line this long is not the one we wait for
	}
	return len(p), nil
}

const maxLine = 64 << 10

// tail keeps the last tailSize bytes written to it, for error messages.
type tail struct {
	mu  sync.Mutex
	buf []byte
}

const tailSize = 2048

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if n := len(t.buf); n > tailSize {
		t.buf = t.buf[n-tailSize:]
	}
	return len(p), nil
}

func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.buf) == 0 {
		return "(no output on stderr)"
	}
	return "stderr: " + strings.TrimSpace(string(t.buf))
}
