package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/shardlimiter/shardlimiter/internal/poll"

	"github.com/shardlimiter/shardlimiter/limit"
	"github.com/shardlimiter/shardlimiter/transport"
)

// proc is one shardlimiter process of a multi-process test.
type proc struct {
	name       string
	cmd        *exec.Cmd
	http, grpc string
}

func buildBinary(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "shardlimiter")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// freeGossipPort finds a port free for TCP and UDP on every host.
func freeGossipPort(t *testing.T, hosts ...string) int {
	t.Helper()
	for range 50 {
		l, err := net.Listen("tcp", hosts[0]+":0")
		if err != nil {
			t.Fatal(err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		ok := true
		for _, h := range hosts {
			addr := net.JoinHostPort(h, strconv.Itoa(port))
			tl, err1 := net.Listen("tcp", addr)
			ul, err2 := net.ListenPacket("udp", addr)
			if tl != nil {
				tl.Close()
			}
			if ul != nil {
				ul.Close()
			}
			ok = ok && err1 == nil && err2 == nil
		}
		if ok {
			return port
		}
	}
	t.Fatal("no free gossip port")
	return 0
}

func startProc(t *testing.T, bin, host string, gossipPort int, join string) *proc {
	t.Helper()
	p := &proc{name: "node-" + host}
	p.cmd = exec.Command(bin,
		"--http-addr", host+":0", "--grpc-addr", host+":0",
		"--gossip-addr", net.JoinHostPort(host, strconv.Itoa(gossipPort)),
		"--node-name", p.name, "--join", join, "--log-level", "warn", "--shutdown-grace", "0s")
	p.cmd.Stderr = os.Stderr
	stdout, err := p.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		p.cmd.Process.Kill()
		p.cmd.Wait()
	})
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatalf("%s: no serving line: %v", p.name, err)
	}
	for _, f := range strings.Fields(line) {
		if v, ok := strings.CutPrefix(f, "http="); ok {
			p.http = v
		}
		if v, ok := strings.CutPrefix(f, "grpc="); ok {
			p.grpc = v
		}
	}
	return p
}

type clusterView struct {
	Node    string `json:"node"`
	Members []struct {
		Name string `json:"name"`
	} `json:"members"`
}

func members(p *proc) []string {
	resp, err := http.Get("http://" + p.http + "/v1/cluster")
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	var v clusterView
	if json.NewDecoder(resp.Body).Decode(&v) != nil {
		return nil
	}
	var names []string
	for _, m := range v.Members {
		names = append(names, m.Name)
	}
	return names
}

// TestThreeProcessesOnDistinctAddresses runs the real binary three times on
// 127.0.0.2-4, joined by --join: they converge, limit exactly across
// nodes, and when one is killed with SIGKILL the others keep answering
// without item errors and drop it from the ring within seconds.
func TestThreeProcessesOnDistinctAddresses(t *testing.T) {
	t.Parallel()
	bin := buildBinary(t)
	hosts := []string{"127.0.0.2", "127.0.0.3", "127.0.0.4"}
	port := freeGossipPort(t, hosts...)
	seed := net.JoinHostPort(hosts[0], strconv.Itoa(port))
	var procs []*proc
	for _, h := range hosts {
		procs = append(procs, startProc(t, bin, h, port, seed))
	}
	poll.Until(t, 20*time.Second, func() bool {
		for _, p := range procs {
			if len(members(p)) != 3 {
				return false
			}
		}
		return true
	}, "condition")

	clients := make([]*transport.Client, len(procs))
	for i, p := range procs {
		c, err := transport.Dial(p.grpc)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		clients[i] = c
	}
	ctx := context.Background()
	// Exactness: 30 keys × 15 hits, each hit entering a different node.
	const keys, limitPerKey, hits = 30, 10, 15
	r := limit.Rule{Algorithm: limit.SlidingLog, Limit: limitPerKey, Period: time.Hour}
	owners := map[string]bool{}
	for k := range keys {
		admitted := 0
		for h := range hits {
			res, err := clients[(k+h)%3].GetRateLimits(ctx, []limit.Check{{Name: "mp", Key: fmt.Sprint("account:", k), Hits: 1, Rule: r}})
			if err != nil || res[0].Error != "" {
				t.Fatalf("key %d hit %d: %+v %v", k, h, res, err)
			}
			owners[res[0].Owner] = true
			if res[0].Allowed {
				admitted++
			}
		}
		if admitted != limitPerKey {
			t.Errorf("key %d: admitted %d of %d, want exactly %d", k, admitted, hits, limitPerKey)
		}
	}
	if len(owners) != 3 {
		t.Errorf("owners seen %v, want all three nodes to own keys", owners)
	}

	// Crash the third node and keep checking through the two others.
	victim := procs[2]
	if err := victim.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	var dropped time.Duration
	for dropped == 0 {
		if time.Since(killed) > 15*time.Second {
			t.Fatalf("%s still in the ring 15 s after SIGKILL: %v / %v", victim.name, members(procs[0]), members(procs[1]))
		}
		for i := range 2 {
			var batch []limit.Check
			for k := range 20 {
				batch = append(batch, limit.Check{Name: "crash", Key: fmt.Sprint("account:", k), Hits: 1, Rule: limit.Rule{Limit: 1 << 20, Period: time.Second}})
			}
			res, err := clients[i].GetRateLimits(ctx, batch)
			if err != nil {
				t.Fatalf("after SIGKILL, %s: %v", procs[i].name, err)
			}
			for _, r := range res {
				if r.Error != "" {
					t.Fatalf("after SIGKILL, %s answered an item error: %q", procs[i].name, r.Error)
				}
			}
		}
		if len(members(procs[0])) == 2 && len(members(procs[1])) == 2 {
			dropped = time.Since(killed)
		}
	}
	t.Logf("dead node dropped from both rings %v after SIGKILL", dropped.Round(10*time.Millisecond))
}
