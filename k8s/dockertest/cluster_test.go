// Package dockertest runs a three-node shardlimiter cluster from the real
// container image on a private Docker network: the image, gossip between
// containers found by name, exact limiting across nodes, and failure of one
// node. It skips when no Docker engine is reachable.
package dockertest

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

const (
	nodes      = 3
	httpPort   = "8080/tcp"
	gossipPort = "7946"
)

func TestThreeNodeCluster(t *testing.T) {
	c, names, _ := startCluster(t)
	c.exactLimits(names)

	// One node dies without leaving: the others keep answering and drop it.
	dead, alive := names[nodes-1], names[:nodes-1]
	docker(t, "kill", dead)
	killed := time.Now()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	converged := false
	for round := 0; !converged; round++ {
		if round > 0 {
			<-tick.C
		}
		for _, name := range alive {
			c.checkNoErrors(name, round)
		}
		converged = true
		for _, name := range alive {
			if c.wantMembers(name, alive) != nil {
				converged = false
			}
		}
		if !converged && time.Since(killed) > deadNodeTimeout {
			for _, name := range alive {
				if err := c.wantMembers(name, alive); err != nil {
					t.Errorf("%v after the kill: %v", deadNodeTimeout, err)
				}
			}
			t.FailNow()
		}
	}
	t.Logf("dead node dropped from both members lists after %v", time.Since(killed).Round(time.Millisecond))
	// Once converged, checks are decided by the survivors only.
	for _, name := range alive {
		for _, owner := range c.checkNoErrors(name, -1) {
			if !slices.Contains(alive, owner) {
				t.Errorf("after convergence %s reports owner %q, want one of %v", name, owner, alive)
			}
		}
	}
}

// startCluster builds the image and starts three joined nodes on a private
// network, waiting until each lists all three and is ready. It skips the
// test when there is no Docker engine.
func startCluster(t *testing.T) (c *cluster, names []string, network string) {
	t.Helper()
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("go not on PATH: cannot build the binary for the image")
	}
	if out, err := exec.Command("docker", "info").CombinedOutput(); err != nil {
		t.Skipf("no Docker engine reachable (docker info: %v): %s", err, lastLine(out))
	}
	id := randomID(t)
	image := buildImage(t, id)
	network = "sl-test-" + id
	docker(t, "network", "create", network)
	t.Cleanup(func() { dockerQuiet("network", "rm", network) }) // Runs after the containers' cleanups.

	var seeds []string
	for i := range nodes {
		name := fmt.Sprintf("sl-%s-%c", id, 'a'+i)
		names = append(names, name)
		seeds = append(seeds, name+":"+gossipPort)
	}
	c = &cluster{t: t, addr: map[string]string{}}
	for _, name := range names {
		c.start(image, network, name, strings.Join(seeds, ","))
	}
	for _, name := range names {
		c.eventually(60*time.Second, func() error { return c.wantMembers(name, names) })
		c.eventually(10*time.Second, func() error { return c.wantReady(name) })
	}
	return c, names, network
}

// TestPartitionHeals cuts one node off the network (it keeps running): the
// two others keep answering every check without an item error and drop it
// from their ring; when the network is back, the three form one ring again
// without any restart.
func TestPartitionHeals(t *testing.T) {
	c, names, network := startCluster(t)
	cut, alive := names[nodes-1], names[:nodes-1]
	docker(t, "network", "disconnect", network, cut)
	round := 0
	for _, name := range alive {
		c.eventually(deadNodeTimeout, func() error {
			round++
			c.checkNoErrors(name, round)
			return c.wantMembers(name, alive)
		})
	}
	for _, name := range alive {
		for _, owner := range c.checkNoErrors(name, -1) {
			if !slices.Contains(alive, owner) {
				t.Errorf("during the partition %s reports owner %q, want one of %v", name, owner, alive)
			}
		}
	}
	docker(t, "network", "connect", network, cut)
	healed := time.Now()
	// Each side pings the members it declared dead and joins the first
	// that answers (gossip/heal.go): about a second.
	for _, name := range alive {
		c.eventually(healTimeout, func() error { return c.wantMembers(name, names) })
	}
	t.Logf("partition healed: all three in one ring %v after the network came back", time.Since(healed).Round(time.Millisecond))
	// Both sides route every key to the same owner again, the healed node
	// among them.
	var batch []check
	for k := range 30 {
		batch = append(batch, check{Name: "dockertest-heal", UniqueKey: fmt.Sprintf("heal-%02d", k),
			Limit: 10, DurationMs: window.Milliseconds(), Algorithm: "TOKEN_BUCKET"})
	}
	c.eventually(10*time.Second, func() error {
		seen := map[string]bool{}
		a, b := c.getRateLimits(alive[0], batch), c.getRateLimits(alive[1], batch)
		for k := range batch {
			if a[k].Metadata["owner"] != b[k].Metadata["owner"] {
				return fmt.Errorf("key %s: owner %q via %s, %q via %s", batch[k].UniqueKey, a[k].Metadata["owner"], alive[0], b[k].Metadata["owner"], alive[1])
			}
			seen[a[k].Metadata["owner"]] = true
		}
		if !seen[cut] {
			return fmt.Errorf("no key owned by the healed node %s: %v", cut, seen)
		}
		return nil
	})
}

// healTimeout bounds how long a healed partition may take to merge: about
// a second by the search for dead members, and room for the seeds' 30 s
// periodic rejoin, the fallback, should docker's reconnect outlast it.
const healTimeout = 60 * time.Second

// deadNodeTimeout bounds how long the survivors may list a killed node.
// memberlist's LAN profile suspects a silent node within ~2 s and declares it
// dead ~4 s later; the rest is slack for a loaded machine.
const deadNodeTimeout = 10 * time.Second

// buildImage builds the image with scripts/build-image.sh (which builds the
// binary from the repository root) under a unique tag, removed at cleanup.
func buildImage(t *testing.T, id string) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	image := "shardlimiter-dockertest:" + id
	cmd := exec.Command("sh", filepath.Join(root, "scripts", "build-image.sh"), image)
	cmd.Dir = root
	out, err := cmd.CombinedOutput()
	t.Cleanup(func() { dockerQuiet("image", "rm", "--force", image) })
	if err != nil {
		t.Fatalf("scripts/build-image.sh %s: %v\n%s", image, err, out)
	}
	return image
}

// cluster drives the containers of one test through their published HTTP
// ports on 127.0.0.1.
type cluster struct {
	t    *testing.T
	addr map[string]string // container name → host:port of its HTTP API
}

// start runs one node with the restrictions of the Kubernetes manifests
// (read-only root, no capabilities, no privilege escalation) and publishes
// its HTTP port on a free loopback port.
func (c *cluster) start(image, network, name, join string) {
	c.t.Helper()
	c.t.Cleanup(func() {
		if c.t.Failed() {
			out, _ := exec.Command("docker", "logs", "--tail", "100", name).CombinedOutput()
			c.t.Logf("docker logs %s:\n%s", name, out)
		}
		dockerQuiet("rm", "--force", "--volumes", name)
	})
	docker(c.t, "run", "--detach", "--name", name, "--hostname", name,
		"--network", network, "--publish", "127.0.0.1::8080",
		"--read-only", "--cap-drop", "ALL", "--security-opt", "no-new-privileges",
		"--env", "SHARDLIMITER_NODE_NAME="+name,
		"--env", "SHARDLIMITER_JOIN="+join,
		"--env", "SHARDLIMITER_LOG_LEVEL=debug",
		image)
	out := strings.TrimSpace(docker(c.t, "port", name, httpPort))
	c.addr[name] = firstLine([]byte(out))
}

func (c *cluster) url(name, path string) string { return "http://" + c.addr[name] + path }

var client = &http.Client{Timeout: 5 * time.Second}

// clusterView is the part of GET /v1/cluster this test reads.
type clusterView struct {
	Node    string `json:"node"`
	Members []struct {
		Name string `json:"name"`
		Addr string `json:"addr"`
	} `json:"members"`
	RingVersion json.Number `json:"ring_version"`
}

// wantMembers checks that node name lists exactly the members want.
func (c *cluster) wantMembers(name string, want []string) error {
	resp, err := client.Get(c.url(name, "/v1/cluster"))
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	defer resp.Body.Close()
	var v clusterView
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
		return fmt.Errorf("%s: GET /v1/cluster: status %d: %w", name, resp.StatusCode, err)
	}
	var got []string
	for _, m := range v.Members {
		got = append(got, m.Name)
	}
	slices.Sort(got)
	if !slices.Equal(got, want) {
		return fmt.Errorf("%s: members %v, want %v", name, got, want)
	}
	if v.Node != name {
		return fmt.Errorf("%s: /v1/cluster node = %q, want %q", name, v.Node, name)
	}
	return nil
}

func (c *cluster) wantReady(name string) error {
	resp, err := client.Get(c.url(name, "/readyz"))
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: GET /readyz = %d, want 200", name, resp.StatusCode)
	}
	return nil
}

// eventually polls cond until it returns nil, failing the test with cond's
// last error when timeout passes first.
func (c *cluster) eventually(timeout time.Duration, cond func() error) {
	c.t.Helper()
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("after %v: %v", timeout, err)
		}
		<-tick.C
	}
}

func docker(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command("docker", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("docker %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// dockerQuiet runs a cleanup command; a failure is reported on stderr, not
// as a test failure (the thing may already be gone).
func dockerQuiet(args ...string) {
	if out, err := exec.Command("docker", args...).CombinedOutput(); err != nil && !bytes.Contains(out, []byte("No such")) {
		fmt.Fprintf(os.Stderr, "cleanup: docker %s: %v: %s\n", strings.Join(args, " "), err, firstLine(out))
	}
}

func firstLine(b []byte) string {
	s, _, _ := strings.Cut(strings.TrimSpace(string(b)), "\n")
	return s
}

func lastLine(b []byte) string {
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return lines[len(lines)-1]
}

func randomID(t *testing.T) string {
	b := make([]byte, 4)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}
