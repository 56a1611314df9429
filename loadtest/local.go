package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"slices"
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

// localCluster is the shardlimiter processes of --local, each on its own
// loopback address (loopback.go) and in its own process group. startLocal
// starts them; during a churn run the churn runner (churn.go) stops,
// joins and restarts nodes, and its caller waits for it before stop, so
// nodes has one writer at a time.
type localCluster struct {
	ctx    context.Context // the nodes': its end stops them (SIGTERM, then SIGKILL)
	cancel context.CancelFunc
	bin    string
	extra  []string
	nodes  []*localNode // node i at i-1; a restart replaces its exited predecessor
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

// startLocal starts n nodes of the server binary bin: the first as seed,
// the others joining it; it returns once every node sees all n members.
// On error everything started is stopped.
func startLocal(ctx context.Context, n int, bin string, extra []string, log io.Writer) (_ *localCluster, err error) {
	cctx, cancel := context.WithCancel(ctx)
	c := &localCluster{ctx: cctx, cancel: cancel, bin: bin, extra: extra}
	defer func() {
		if err != nil {
			c.stop()
		}
	}()
	if note := loopbackNote(); note != "" {
		fmt.Fprintln(log, "loadtest: "+note)
	}
	for i := range n {
		nd, _, err := c.launch(i+1, nil)
		if err != nil {
			return nil, err
		}
		c.nodes = append(c.nodes, nd)
		fmt.Fprintf(log, "loadtest: started %s grpc=%s http=%s gossip=%s\n", nd.name, nd.grpc, nd.http, nd.gossip)
	}
	if err := c.converge(cctx, convergeWithin); err != nil {
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
	})
}

// discard kills every node at once (SIGKILL, no graceful leave) and waits
// for them: for a cluster whose run is over and whose state nobody needs,
// where a graceful stop would only add the server's shutdown time.
func (c *localCluster) discard() {
	for _, nd := range c.nodes {
		if nd.running() {
			signalGroup(nd.cmd, sigKill)
		}
	}
	c.stop()
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

// running reports whether nd's process has not exited.
func (nd *localNode) running() bool {
	select {
	case <-nd.exited:
		return false
	default:
		return true
	}
}

// launch starts node num (1-based) on its loopback host, joining node 1
// unless it is node 1, and waits until it is ready. A restart passes the
// node's previous process: its addresses are reused where still free
// (same reports whether all were). A node that exits while starting (its
// probed gossip port taken meanwhile) is retried on fresh ports.
func (c *localCluster) launch(num int, prev *localNode) (nd *localNode, same bool, err error) {
	host, name := nodeHost(num), nodeName(num)
	for attempt := range startAttempts {
		var a nodeAddrs
		same = false
		if prev != nil && attempt == 0 {
			a, same, err = reuseAddrs(nodeAddrs{gossip: prev.gossip, grpc: prev.grpc, http: prev.http}, host)
		} else {
			a, err = freshAddrs(host)
		}
		if err != nil {
			return nil, false, err
		}
		args := []string{"--http-addr=" + a.http, "--grpc-addr=" + a.grpc, "--gossip-addr=" + a.gossip,
			"--node-name=" + name, "--log-level=warn", "--shutdown-grace=0s"}
		if num > 1 {
			args = append(args, "--join="+c.nodes[0].gossip)
		}
		// The peer port through the environment: a server binary from
		// before --peer-addr (a baseline of --server-bin) ignores it.
		env := []string{"SHARDLIMITER_PEER_ADDR=" + net.JoinHostPort(host, "0")}
		if nd, err = spawn(c.ctx, c.bin, append(args, c.extra...), env); err != nil {
			return nil, false, err
		}
		nd.name, nd.gossip = name, a.gossip
		if err = nd.waitReady(c.ctx); err == nil {
			return nd, same, nil
		}
		nd.cmd.Cancel()
		<-nd.exited
		if !errors.Is(err, errExited) {
			return nil, false, err
		}
	}
	return nil, false, err
}

// nodeName is the node name of node num (1-based, in start order).
func nodeName(num int) string { return fmt.Sprintf("loadtest-%d", num) }

// spawn starts bin in its own process group; ctx's end terminates it.
func spawn(ctx context.Context, bin string, args, env []string) (*localNode, error) {
	nd := &localNode{serving: make(chan string, 1), exited: make(chan struct{}), stderr: &tail{}}
	nd.cmd = exec.CommandContext(ctx, bin, args...)
	nd.cmd.Env = append(os.Environ(), env...)
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
		resp, err := httpClient.Get(httpScheme + nd.http + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
}

// converge waits until every running node's /v1/cluster lists exactly
// the running nodes.
func (c *localCluster) converge(ctx context.Context, within time.Duration) error {
	var up []string
	for _, nd := range c.nodes {
		if nd.running() {
			up = append(up, nd.name)
		}
	}
	slices.Sort(up)
	for _, nd := range c.nodes {
		if !nd.running() {
			continue
		}
		err := poll(ctx, nd, within, fmt.Sprintf("seeing exactly %s", strings.Join(up, ", ")), func() bool {
			return slices.Equal(members(nd.http), up)
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

// members returns the sorted member names the node at httpAddr lists, or
// nil when it does not answer.
func members(httpAddr string) []string {
	resp, err := httpClient.Get(httpScheme + httpAddr + "/v1/cluster")
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	var info struct {
		Members []struct {
			Name string `json:"name"`
		} `json:"members"`
	}
	if json.NewDecoder(resp.Body).Decode(&info) != nil {
		return nil
	}
	names := make([]string, 0, len(info.Members))
	for _, m := range info.Members {
		names = append(names, m.Name)
	}
	slices.Sort(names)
	return names
}
