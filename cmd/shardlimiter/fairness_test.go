package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shardlimiter/shardlimiter/internal/poll"
	"github.com/shardlimiter/shardlimiter/transport"
	"github.com/shardlimiter/shardlimiter/transport/dial"
)

// latencies collects call durations for percentiles in the log.
type latencies struct {
	mu sync.Mutex
	d  []time.Duration
}

func (l *latencies) add(d time.Duration) {
	l.mu.Lock()
	l.d = append(l.d, d)
	l.mu.Unlock()
}

// pct returns the p-th percentile (0 < p <= 100), 0 when empty.
func (l *latencies) pct(p float64) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.d) == 0 {
		return 0
	}
	slices.Sort(l.d)
	return l.d[min(len(l.d)-1, int(float64(len(l.d))*p/100))]
}

func (l *latencies) String() string {
	return fmt.Sprintf("p50 %v p99 %v", l.pct(50).Round(time.Microsecond), l.pct(99).Round(time.Microsecond))
}

// TestWellBehavedClientIsServedDuringAFlood is the overload reproduction
// against the real binary (--max-memory 256MiB): a client process
// (TestFloodProcess) floods the node with 128 callers × batches of 1000 on
// one connection, then on 16, each caller calling again at once when
// refused; meanwhile a well-behaved client on a connection of its own
// makes one call of one check at a time. The well-behaved client is answered (at most a few refusals or
// errors), the flood is refused (RESOURCE_EXHAUSTED with a retry delay,
// nothing else), and the process stays under its memory budget
// throughout. Latencies are logged, not asserted.
func TestWellBehavedClientIsServedDuringAFlood(t *testing.T) {
	if _, err := os.Stat("/proc/self/status"); err != nil {
		t.Skip("needs /proc to read the resident set size")
	}
	t.Parallel()
	const (
		maxMemory = 256 << 20
		callers   = 128
		batch     = 1000
		phase     = 3 * time.Second
	)
	bin := buildBinary(t)
	// The bound of a 2-core node, whatever this machine has.
	p := startProc(t, bin, "127.0.0.1", freeGossipPort(t, "127.0.0.1"), "",
		"--max-memory", strconv.Itoa(maxMemory), "--max-inflight", "16000")
	url := "http://" + p.http
	good := dialAPI(t, p.grpc)
	poll.Until(t, 10*time.Second, func() bool { return wellBehaved(good, p.http) == nil }, "node answers")

	var peak atomic.Int64
	sampling, stopSampling := context.WithCancel(context.Background())
	var sampler sync.WaitGroup
	sampler.Go(func() {
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for sampling.Err() == nil {
			if rss := rssBytes(p.cmd.Process.Pid); rss > peak.Load() {
				peak.Store(rss)
			}
			select {
			case <-sampling.Done():
			case <-tick.C:
			}
		}
	})
	defer func() { stopSampling(); sampler.Wait() }()

	for _, conns := range []int{1, 16} {
		t.Run(fmt.Sprintf("%d connections", conns), func(t *testing.T) {
			// The flood runs in a process of its own, so that its callers
			// do not take this one's CPU from the well-behaved client.
			flood := exec.Command(os.Args[0], "-test.run=^TestFloodProcess$")
			flood.Env = append(os.Environ(), floodEnv+"="+p.grpc, fmt.Sprintf("%s=%d,%d,%d,%v", floodSpecEnv, conns, callers, batch, phase))
			out, err := flood.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			flood.Stderr = os.Stderr
			if err := flood.Start(); err != nil {
				t.Fatal(err)
			}
			lines := bufio.NewScanner(out)
			if !lines.Scan() || lines.Text() != "flooding" {
				t.Fatalf("flood process: %q, want \"flooding\"", lines.Text())
			}
			// The well-behaved client: one check per call, one at a time.
			var answered, goodRefused, goodErrors int
			var goodLat latencies
			for i, end := 0, time.Now().Add(phase); time.Now().Before(end); i++ {
				cctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				start := time.Now()
				res, err := good.GetRateLimits(cctx, okBatch(fmt.Sprintf("good-%d-%d", conns, i), 1))
				cancel()
				switch {
				case err == nil && len(res) == 1 && res[0].Error == "" && res[0].Allowed:
					answered++
					goodLat.add(time.Since(start))
				case transport.IsShed(err):
					goodRefused++
				default:
					goodErrors++
					t.Logf("well-behaved call %d: %v %v", i, res, err)
				}
			}
			var report string
			if lines.Scan() {
				report = lines.Text()
			}
			for lines.Scan() { // the test binary's PASS
			}
			if err := flood.Wait(); err != nil {
				t.Fatalf("flood process: %v (%s)", err, report)
			}
			t.Logf("flood on %d connection(s), %d callers × %d: %s", conns, callers, batch, report)
			t.Logf("well-behaved client: %d answers (%v), %d refused, %d errors", answered, &goodLat, goodRefused, goodErrors)
			if answered < 20 {
				t.Errorf("the well-behaved client got %d answers in %v of flood, want at least 20", answered, phase)
			}
			if bad := goodRefused + goodErrors; bad*20 > answered {
				t.Errorf("the well-behaved client: %d refusals and errors against %d answers, want at most 5%%", bad, answered)
			}
			if strings.Contains(report, " 0 refused") {
				t.Errorf("nothing of the flood was refused (%s): not a flood", report)
			}
		})
	}
	stopSampling()
	sampler.Wait()
	t.Logf("peak RSS %.1f MiB with --max-memory %d MiB", float64(peak.Load())/(1<<20), maxMemory>>20)
	if peak.Load() > maxMemory {
		t.Errorf("peak RSS %d MiB, want <= --max-memory %d MiB", peak.Load()>>20, maxMemory>>20)
	}
	poll.Until(t, 10*time.Second, func() bool {
		return metric(http.DefaultClient, url, "shardlimiter_transport_inflight_checks", `pool="client"`) == 0
	}, "inflight_checks{pool=client} not back at 0 after the flood")
}

// The environment of the flood process of
// TestWellBehavedClientIsServedDuringAFlood: the node's gRPC address, and
// connections,callers,batch,duration.
const (
	floodEnv     = "SHARDLIMITER_TEST_FLOOD"
	floodSpecEnv = "SHARDLIMITER_TEST_FLOOD_SPEC"
)

// TestFloodProcess is the flood of TestWellBehavedClientIsServedDuringAFlood,
// run as a process of its own: callers on conns connections, each sending
// batches again and again, at once after a refusal. It prints "flooding"
// once connected, then one line of results. A call may fail only with
// RESOURCE_EXHAUSTED and a retry delay, or time out at the end.
func TestFloodProcess(t *testing.T) {
	addr := os.Getenv(floodEnv)
	if addr == "" {
		t.Skip("the flood process of TestWellBehavedClientIsServedDuringAFlood")
	}
	var conns, callers, batch int
	var period string
	if _, err := fmt.Sscanf(strings.ReplaceAll(os.Getenv(floodSpecEnv), ",", " "), "%d %d %d %s", &conns, &callers, &batch, &period); err != nil {
		t.Fatalf("%s: %v", floodSpecEnv, err)
	}
	phase, err := time.ParseDuration(period)
	if err != nil {
		t.Fatalf("%s: %v", floodSpecEnv, err)
	}
	clients := make([]*dial.Client, conns)
	for i := range clients {
		clients[i] = dialAPI(t, addr)
		if _, err := clients[i].GetRateLimits(context.Background(), okBatch("probe", 1)); err != nil && !transport.IsShed(err) {
			t.Fatalf("probe: %v", err)
		}
	}
	fmt.Println("flooding")
	ctx, stop := context.WithTimeout(context.Background(), phase)
	defer stop()
	var served, refused, failed atomic.Int64
	var servedLat, refusedLat latencies
	var wg sync.WaitGroup
	for w := range callers {
		wg.Go(func() {
			c := clients[w%conns]
			checks := okBatch(fmt.Sprintf("flood-%d-%d", conns, w), batch)
			for ctx.Err() == nil {
				start := time.Now()
				_, err := c.GetRateLimits(ctx, checks)
				switch d, ok := transport.RetryDelay(err); {
				case err == nil:
					served.Add(1)
					servedLat.add(time.Since(start))
				case transport.IsShed(err) && ok && d > 0:
					refused.Add(1)
					refusedLat.add(time.Since(start))
				case ctx.Err() != nil || errors.Is(err, transport.ErrTimeout):
				default:
					failed.Add(1)
					t.Errorf("flood call: %v, want an answer or RESOURCE_EXHAUSTED with a retry delay", err)
				}
			}
		})
	}
	wg.Wait()
	fmt.Printf("%d served (%v), %d refused (%v), %d failed\n", served.Load(), &servedLat, refused.Load(), &refusedLat, failed.Load())
}
