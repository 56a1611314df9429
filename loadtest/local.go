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

	"github.com/shardlimiter/shardlimiter/internal/netns"
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

	// Set by --mode nemesis before the first launch (nemesis.go):
	lab       *netns.Lab              // non-nil: node i runs in the lab's namespace i-1
	nodeFlags func(num int) []string  // extra flags of node num (its --state-dir)
	stderrTo  func(num int) io.Writer // also receives node num's stderr
	seeds     []string                // non-nil: every node's gossip address; each joins all the others (set once started)
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
	return startLocalWith(ctx, n, bin, extra, log, nil)
}

// startLocalWith is startLocal with setup (when not nil) called on the
// cluster before its first node starts.
func startLocalWith(ctx context.Context, n int, bin string, extra []string, log io.Writer, setup func(*localCluster)) (_ *localCluster, err error) {
	cctx, cancel := context.WithCancel(ctx)
	c := &localCluster{ctx: cctx, cancel: cancel, bin: bin, extra: extra}
	if setup != nil {
		setup(c)
	}
	defer func() {
		if err != nil {
			c.stop()
		}
	}()
	if note := loopbackNote(); note != "" && c.lab == nil {
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
	if c.lab != nil {
		host = c.lab.IP(num - 1)
	}
	for attempt := range startAttempts {
		var a nodeAddrs
		if a, same, err = c.addrsFor(num, host, prev, attempt); err != nil {
			return nil, false, err
		}
		args := []string{"--http-addr=" + a.http, "--grpc-addr=" + a.grpc, "--gossip-addr=" + a.gossip,
			"--node-name=" + name, "--log-level=warn", "--shutdown-grace=0s"}
		if join := c.joinList(num); join != "" {
			args = append(args, "--join="+join)
		}
		if c.nodeFlags != nil {
			args = append(args, c.nodeFlags(num)...)
		}
		// The peer port through the environment: a server binary from
		// before --peer-addr (a baseline of --server-bin) ignores it.
		env := []string{"SHARDLIMITER_PEER_ADDR=" + net.JoinHostPort(host, "0")}
		if nd, err = c.spawnNode(num, append(args, c.extra...), env); err != nil {
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

// addrsFor returns node num's listen addresses for its attempt-th start:
// in a lab, fixed ports of its own namespace (nothing else listens
// there); else its previous addresses where still free, or fresh ones.
func (c *localCluster) addrsFor(num int, host string, prev *localNode, attempt int) (a nodeAddrs, same bool, err error) {
	if c.lab != nil {
		return nodeAddrs{gossip: net.JoinHostPort(host, "7946"), grpc: net.JoinHostPort(host, "8081"),
			http: net.JoinHostPort(host, "8080")}, true, nil
	}
	if prev != nil && attempt == 0 {
		return reuseAddrs(nodeAddrs{gossip: prev.gossip, grpc: prev.grpc, http: prev.http}, host)
	}
	a, err = freshAddrs(host)
	return a, false, err
}

// joinList returns node num's --join: node 1's gossip address, or with
// seeds every other node's (a restart after a stop of every node finds
// whichever is back first).
func (c *localCluster) joinList(num int) string {
	if c.seeds != nil {
		others := slices.Delete(slices.Clone(c.seeds), num-1, num)
		return strings.Join(others, ",")
	}
	if num > 1 {
		return c.nodes[0].gossip
	}
	return ""
}

// spawnNode starts node num's process: bin, or in a lab bin within the
// node's namespace.
func (c *localCluster) spawnNode(num int, args, env []string) (*localNode, error) {
	var cmd *exec.Cmd
	if c.lab != nil {
		cmd = c.lab.Command(c.ctx, num-1, c.bin, args...)
	} else {
		cmd = exec.CommandContext(c.ctx, c.bin, args...)
	}
	var also io.Writer
	if c.stderrTo != nil {
		also = c.stderrTo(num)
	}
	return spawn(cmd, env, also)
}

// spawn starts cmd in its own process group; its context's end terminates
// it. Its stderr goes to the node's tail and to also (when not nil).
func spawn(cmd *exec.Cmd, env []string, also io.Writer) (*localNode, error) {
	nd := &localNode{serving: make(chan string, 1), exited: make(chan struct{}), stderr: &tail{}}
	nd.cmd = cmd
	nd.cmd.Env = append(os.Environ(), env...)
	setProcessGroup(nd.cmd)
	nd.cmd.WaitDelay = stopGrace
	nd.cmd.Stdout = &lineWatch{prefix: "serving ", found: nd.serving}
	nd.cmd.Stderr = nd.stderr
	if also != nil {
		nd.cmd.Stderr = io.MultiWriter(nd.stderr, also)
	}
	if err := nd.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", cmd.Path, err)
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
