package manifests

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// networkEnv are the variables that tie a node to its pod's network; the
// live test replaces them with loopback addresses.
var networkEnv = map[string]bool{
	"SHARDLIMITER_HTTP_ADDR":      true,
	"SHARDLIMITER_GRPC_ADDR":      true,
	"SHARDLIMITER_GOSSIP_ADDR":    true,
	"SHARDLIMITER_ADVERTISE_ADDR": true,
	"SHARDLIMITER_JOIN":           true,
	"SHARDLIMITER_NODE_NAME":      true,
	"POD_NAMESPACE":               true,
}

// TestLiveProbes runs the binary with each overlay's configuration on
// loopback and checks what the kubelet and Prometheus will see: the probe
// and scrape paths answer 200 on the http port, readiness turns 503 after
// SIGTERM, and the process exits 0 within the time the grace period leaves
// after the preStop sleep.
func TestLiveProbes(t *testing.T) {
	bin := binary(t)
	for _, dir := range overlays {
		t.Run(dir, func(t *testing.T) {
			t.Parallel()
			p := render(t, dir).limiter(t)
			c := p.Container

			gossip, tcp := freePorts(t, 2)
			httpAddr := fmt.Sprintf("127.0.0.1:%d", tcp[0])
			env := envWithout(os.Environ(), "SHARDLIMITER_")
			for k, v := range p.Env {
				if !networkEnv[k] {
					env = append(env, k+"="+v)
				}
			}
			env = append(env,
				"SHARDLIMITER_HTTP_ADDR="+httpAddr,
				fmt.Sprintf("SHARDLIMITER_GRPC_ADDR=127.0.0.1:%d", tcp[1]),
				fmt.Sprintf("SHARDLIMITER_GOSSIP_ADDR=127.0.0.1:%d", gossip),
				"SHARDLIMITER_ADVERTISE_ADDR=127.0.0.1",
				"SHARDLIMITER_NODE_NAME=probe-test",
			)
			proc := startProcess(t, bin, env)

			if c.StartupProbe == nil || c.ReadinessProbe == nil || c.LivenessProbe == nil ||
				c.Lifecycle == nil || c.Lifecycle.PreStop == nil || c.Lifecycle.PreStop.Sleep == nil ||
				p.Template.Spec.TerminationGracePeriodSeconds == nil {
				t.Fatal("probes, preStop sleep or grace period missing (see TestWiring)")
			}
			paths := []string{
				c.StartupProbe.HTTPGet.Path,
				c.ReadinessProbe.HTTPGet.Path,
				c.LivenessProbe.HTTPGet.Path,
				p.Template.Annotations["prometheus.io/path"],
			}
			for _, path := range paths {
				url := "http://" + httpAddr + path
				eventually(t, 20*time.Second, func() error { return wantStatus(url, http.StatusOK) })
			}

			// Shutdown: the kubelet has already slept preStop seconds when
			// it sends SIGTERM; what is left of the grace period must cover
			// the rest.
			left := time.Duration(*p.Template.Spec.TerminationGracePeriodSeconds-c.Lifecycle.PreStop.Sleep.Seconds) * time.Second
			if err := proc.cmd.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			ready := "http://" + httpAddr + c.ReadinessProbe.HTTPGet.Path
			eventually(t, left, func() error {
				if proc.exited() {
					return errors.New("process exited before readiness reported 503")
				}
				return wantStatus(ready, http.StatusServiceUnavailable)
			})
			select {
			case <-proc.done:
				if proc.err != nil {
					t.Errorf("after SIGTERM: %v, want exit status 0\n%s", proc.err, proc.output())
				}
			case <-time.After(left):
				t.Errorf("still running %v after SIGTERM: the kubelet would kill it\n%s", left, proc.output())
			}
		})
	}
}

// process is a started binary whose output is kept for failure messages.
type process struct {
	cmd  *exec.Cmd
	done chan struct{}
	err  error // valid after done is closed
	mu   sync.Mutex
	out  bytes.Buffer
}

func startProcess(t *testing.T, bin string, env []string) *process {
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
			t.Logf("shardlimiter output:\n%s", p.output())
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
