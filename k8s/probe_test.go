package manifests

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// networkEnv are the variables that tie a node to its pod's network; the
// live test replaces them with loopback addresses.
var networkEnv = map[string]bool{
	"SHARDLIMITER_HTTP_ADDR":      true,
	"SHARDLIMITER_GRPC_ADDR":      true,
	"SHARDLIMITER_PEER_ADDR":      true,
	"SHARDLIMITER_GOSSIP_ADDR":    true,
	"SHARDLIMITER_ADVERTISE_ADDR": true,
	"SHARDLIMITER_JOIN":           true,
	"SHARDLIMITER_NODE_NAME":      true,
	"POD_NAMESPACE":               true,
}

// TestLiveProbes runs the binary with each source's configuration on
// loopback and checks what the kubelet and Prometheus will see: the probe
// and scrape paths answer 200 on the http port; after SIGTERM readiness turns
// 503 while the node keeps answering for its shutdown grace, and the process
// exits 0 within what the pod's grace period leaves after the preStop sleep.
// A second node joins the first, so that the shutdown grace applies (a node
// alone has nobody to hand its keys to and may exit at once).
func TestLiveProbes(t *testing.T) {
	bin := binary(t)
	for _, src := range sources {
		dir := src.name
		if src.want.secure {
			// Its key and certificate files exist only in the pod; the
			// binary's TLS, keys and health listener are tested in
			// cmd/shardlimiter (TestClientTLS, TestPeerMTLS, TestGossipKeys).
			continue
		}
		t.Run(dir, func(t *testing.T) {
			t.Parallel()
			r := render(t, dir)
			p := r.limiter(t)
			c := p.Container
			if c.StartupProbe == nil || c.ReadinessProbe == nil || c.LivenessProbe == nil ||
				c.Lifecycle == nil || c.Lifecycle.PreStop == nil || c.Lifecycle.PreStop.Sleep == nil ||
				p.Template.Spec.TerminationGracePeriodSeconds == nil {
				t.Fatal("probes, preStop sleep or grace period missing (see TestWiring)")
			}

			rules := mountRules(t, r, p)
			first := startNode(t, bin, p, rules, "probe-a", "")
			second := startNode(t, bin, p, rules, "probe-b", first.gossip)
			paths := []string{
				c.StartupProbe.HTTPGet.Path,
				c.ReadinessProbe.HTTPGet.Path,
				c.LivenessProbe.HTTPGet.Path,
				p.Template.Annotations["prometheus.io/path"],
			}
			for _, n := range []*node{first, second} {
				for _, path := range paths {
					eventually(t, 20*time.Second, func() error { return wantStatus(n.url(path), http.StatusOK) })
				}
			}
			eventually(t, 20*time.Second, func() error { return wantMembers(first.url("/v1/cluster"), 2) })

			// The kubelet has already slept preStop seconds when it sends
			// SIGTERM; what is left of the grace period must cover the rest.
			left := time.Duration(*p.Template.Spec.TerminationGracePeriodSeconds-c.Lifecycle.PreStop.Sleep.Seconds) * time.Second
			if err := first.proc.cmd.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			sent := time.Now()
			eventually(t, left, func() error {
				if first.proc.exited() {
					return errors.New("process exited before readiness reported 503")
				}
				return wantStatus(first.url(c.ReadinessProbe.HTTPGet.Path), http.StatusServiceUnavailable)
			})
			// Still alive (liveness must not restart a leaving node).
			if err := wantStatus(first.url(c.LivenessProbe.HTTPGet.Path), http.StatusOK); err != nil && !first.proc.exited() {
				t.Errorf("while leaving: %v", err)
			}
			select {
			case <-first.proc.done:
				if first.proc.err != nil {
					t.Errorf("after SIGTERM: %v, want exit status 0\n%s", first.proc.err, first.proc.output())
				}
				t.Logf("exited %v after SIGTERM (shutdown grace %v, grace period left %v)",
					time.Since(sent).Round(time.Millisecond), p.shutdownGrace(t), left)
			case <-time.After(left - time.Since(sent)):
				t.Errorf("still running %v after SIGTERM: the kubelet would kill it\n%s", left, first.proc.output())
			}
		})
	}
}

// node is one running binary of TestLiveProbes.
type node struct {
	http, gossip string // loopback host:port
	proc         *process
}

func (n *node) url(path string) string { return "http://" + n.http + path }

// startNode starts the binary with the manifest's environment, except that
// the network variables are replaced by free loopback ports, and returns
// once it serves. A port found free may be taken by another process (a
// node of a parallel subtest) before this one binds it: a start that fails
// for an address in use is tried again on other ports.
func startNode(t *testing.T, bin string, p *limiterPod, rules, name, join string) *node {
	t.Helper()
	for try := 1; ; try++ {
		n := startNodeOnce(t, bin, p, rules, name, join)
		serving := false
		eventually(t, 20*time.Second, func() error {
			out := n.proc.output()
			// Listeners first, then gossip's (its own log line). The
			// serving line follows the log format: the manifests set
			// SHARDLIMITER_LOG_FORMAT=json.
			serving = (strings.Contains(out, "serving node=") || strings.Contains(out, `"msg":"serving"`)) && strings.Contains(out, "gossip started")
			if serving || n.proc.exited() {
				return nil
			}
			return fmt.Errorf("%s: not serving yet:\n%s", name, out)
		})
		if serving {
			return n
		}
		if out := n.proc.output(); try == 5 || !strings.Contains(out, "address already in use") {
			t.Fatalf("%s exited before serving (try %d): %v\n%s", name, try, n.proc.err, out)
		}
		t.Logf("%s: a port was taken before it bound it; starting again on others", name)
	}
}

func startNodeOnce(t *testing.T, bin string, p *limiterPod, rules, name, join string) *node {
	t.Helper()
	gossip, tcp := freePorts(t, 3)
	n := &node{
		http:   fmt.Sprintf("127.0.0.1:%d", tcp[0]),
		gossip: fmt.Sprintf("127.0.0.1:%d", gossip),
	}
	env := envWithout(os.Environ(), "SHARDLIMITER_")
	for k, v := range p.Env {
		if k == "SHARDLIMITER_CONFIG" {
			v = rules // the rules ConfigMap's volume, here a directory
		}
		if !networkEnv[k] {
			env = append(env, k+"="+v)
		}
	}
	env = append(env,
		"SHARDLIMITER_HTTP_ADDR="+n.http,
		fmt.Sprintf("SHARDLIMITER_GRPC_ADDR=127.0.0.1:%d", tcp[1]),
		fmt.Sprintf("SHARDLIMITER_PEER_ADDR=127.0.0.1:%d", tcp[2]),
		"SHARDLIMITER_GOSSIP_ADDR="+n.gossip,
		"SHARDLIMITER_ADVERTISE_ADDR=127.0.0.1",
		"SHARDLIMITER_NODE_NAME="+name,
		"SHARDLIMITER_JOIN="+join,
	)
	n.proc = startProcess(t, name, bin, env)
	return n
}

// mountRules stands for the rules ConfigMap mounted at SHARDLIMITER_CONFIG:
// a directory holding the files of the ConfigMap the pod mounts there, as
// rendered.
func mountRules(t *testing.T, r *rendered, p *limiterPod) string {
	t.Helper()
	dir := t.TempDir()
	at, ok := p.Env["SHARDLIMITER_CONFIG"]
	if !ok {
		return dir
	}
	var cm *corev1.ConfigMap
	for _, m := range p.Container.VolumeMounts {
		if path.Clean(m.MountPath) != path.Clean(at) {
			continue
		}
		for _, v := range p.Template.Spec.Volumes {
			if v.Name == m.Name && v.ConfigMap != nil {
				cm = r.configMap(v.ConfigMap.Name, p.Namespace)
			}
		}
	}
	if cm == nil {
		t.Fatalf("SHARDLIMITER_CONFIG=%s is not a mounted ConfigMap of the rendering", at)
	}
	for name, data := range cm.Data {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// wantMembers checks that GET url (/v1/cluster) lists n members.
func wantMembers(url string, n int) error {
	resp, err := httpClient.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	var v struct {
		Members []json.RawMessage `json:"members"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
		return fmt.Errorf("GET %s: %w", url, err)
	}
	if len(v.Members) != n {
		return fmt.Errorf("GET %s: %d members, want %d", url, len(v.Members), n)
	}
	return nil
}

// process is a started binary whose output is kept for failure messages.
type process struct {
	cmd  *exec.Cmd
	done chan struct{}
	err  error // valid after done is closed
	mu   sync.Mutex
	out  bytes.Buffer
}

func startProcess(t *testing.T, name, bin string, env []string) *process {
	t.Helper()
	p := &process{done: make(chan struct{})}
	p.cmd = exec.Command(bin)
	p.cmd.Env = env
	p.cmd.Stdout, p.cmd.Stderr = p, p
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		if !p.exited() {
			p.cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			t.Logf("%s output:\n%s", name, p.output())
		}
	})
	return p
}

func (p *process) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.Write(b)
}

func (p *process) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.String()
}

func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

var httpClient = &http.Client{Timeout: 2 * time.Second}

func wantStatus(url string, want int) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	if resp.StatusCode != want {
		return fmt.Errorf("GET %s = %d %q, want %d", url, resp.StatusCode, strings.TrimSpace(string(body)), want)
	}
	return nil
}

// eventually polls cond until it returns nil, failing the test with cond's
// last error when timeout passes first.
func eventually(t *testing.T, timeout time.Duration, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %v: %v", timeout, err)
		}
		<-tick.C
	}
}
