package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// The tests below run the whole tool: a real cluster of server processes
// on loopback, built once for the package.
var built struct {
	once sync.Once
	dir  string
	bin  string
	err  error
}

func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == serveCalibrationArg {
		// The test binary is the tool's binary for --calibrate-process.
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
		code := serveCalibration(ctx, os.Args[2:], os.Stdout, os.Stderr)
		stop()
		os.Exit(code)
	}
	code := m.Run()
	if built.dir != "" {
		os.RemoveAll(built.dir)
	}
	if err := goleak.Find(); code == 0 && err != nil {
		fmt.Fprintf(os.Stderr, "goroutines left behind: %v\n", err)
		code = 1
	}
	os.Exit(code)
}

// serverBin builds ./cmd/shardlimiter once, the way --local does.
func serverBin(t *testing.T) string {
	t.Helper()
	built.once.Do(func() {
		if built.dir, built.err = os.MkdirTemp("", "loadtest-test-"); built.err == nil {
			built.bin, built.err = buildServer(context.Background(), built.dir)
		}
	})
	if built.err != nil {
		t.Fatal(built.err)
	}
	return built.bin
}

// runJSON runs the tool with --json --quiet and decodes its report.
func runJSON(t *testing.T, args ...string) *result {
	t.Helper()
	var stdout, stderr bytes.Buffer
	args = append(args, "--json", "--quiet")
	if code := run(context.Background(), args, &stdout, &stderr); code != exitOK {
		t.Fatalf("loadtest %s: exit %d; stderr: %s", strings.Join(args, " "), code, stderr.String())
	}
	var r result
	if err := json.Unmarshal(stdout.Bytes(), &r); err != nil {
		t.Fatalf("loadtest %s: stdout is not one JSON object: %v\n%s", strings.Join(args, " "), err, stdout.String())
	}
	return &r
}

func TestThroughputAgainstLocalCluster(t *testing.T) {
	t.Parallel()
	r := runJSON(t, "--local", "3", "--server-bin", serverBin(t), "--duration", "1s",
		"--concurrency", "4", "--batch", "50", "--keys", "1000", "--dist", "zipf")
	if r.ChecksPerSecond <= 0 || r.RPCsPerSecond <= 0 || len(r.Targets) != 3 {
		t.Errorf("checks/s, rpc/s, targets = %v, %v, %v; want a positive rate over 3 targets", r.ChecksPerSecond, r.RPCsPerSecond, r.Targets)
	}
	if len(r.Errors) != 0 || r.Abandoned != 0 {
		t.Errorf("errors = %v, abandoned %d; want none", r.Errors, r.Abandoned)
	}
	if r.Admitted != r.Checks || r.Checks != r.RPCs*50 {
		t.Errorf("checks %d, admitted %d, rpcs %d: want every check of every call admitted under the huge default limit", r.Checks, r.Admitted, r.RPCs)
	}
	if l := r.LatencyMS; !(l.P50 > 0 && l.P50 <= l.P90 && l.P90 <= l.P99 && l.P99 <= l.P999 && l.P999 <= l.Max) {
		t.Errorf("latency percentiles out of order: %+v", l)
	}
	if r.ServerCPUMicrosPerCheck == nil || *r.ServerCPUMicrosPerCheck <= 0 {
		t.Errorf("server CPU per check = %v, want it measured from the local servers' metrics", r.ServerCPUMicrosPerCheck)
	}
}

func TestCalibrationAsAProcess(t *testing.T) {
	t.Parallel()
	r := runJSON(t, "--calibrate", "--calibrate-process", "--duration", "300ms", "--concurrency", "2", "--batch", "10")
	if r.Run != "calibration" || r.CalibrationServer != calibrationProcess {
		t.Errorf("run, calibration server = %q, %q; want calibration, %q", r.Run, r.CalibrationServer, calibrationProcess)
	}
	if r.Checks == 0 || r.Admitted != r.Checks || len(r.Errors) != 0 {
		t.Errorf("checks %d, admitted %d, errors %v; want every check admitted", r.Checks, r.Admitted, r.Errors)
	}
	if r.ServerCPUMicrosPerCheck == nil || *r.ServerCPUMicrosPerCheck <= 0 {
		t.Errorf("server CPU per check = %v, want it read from the child's metrics", r.ServerCPUMicrosPerCheck)
	}
}

func TestAccuracyAgainstLocalCluster(t *testing.T) {
	t.Parallel()
	r := runJSON(t, "--local", "3", "--server-bin", serverBin(t), "--mode", "accuracy", "--algorithm", "all",
		"--duration", "600ms", "--limit", "5", "--period", "200ms", "--keys", "6")
	if r.OverAdmittedPct == nil || r.UnderAdmittedPct == nil || len(r.Accuracy) != 5 {
		t.Fatalf("report lacks over/under admission or per-algorithm detail: %+v", r)
	}
	if len(r.Errors) != 0 {
		t.Errorf("errors = %v, want none", r.Errors)
	}
	// Every bound is a hard one: a correct server never exceeds it.
	if *r.OverAdmittedPct != 0 {
		t.Errorf("over_admitted_pct = %v, want 0", *r.OverAdmittedPct)
	}
	for _, a := range r.Accuracy {
		if a.OverAdmittedHits != 0 || a.AdmittedHits == 0 || a.RejectedHits == 0 {
			t.Errorf("%s: admitted %d, rejected %d, over the bound %d; want some of each but none over", a.Algorithm, a.AdmittedHits, a.RejectedHits, a.OverAdmittedHits)
		}
		if a.SpanViolations != nil && *a.SpanViolations != 0 {
			t.Errorf("%s: %d span violations, want 0", a.Algorithm, *a.SpanViolations)
		}
	}
}

func TestCalibrate(t *testing.T) {
	t.Parallel()
	r := runJSON(t, "--calibrate", "--duration", "500ms", "--concurrency", "4", "--batch", "100", "--keys", "1000")
	if r.Run != "calibration" || r.ChecksPerSecond <= 0 || len(r.Errors) != 0 || r.Admitted != r.Checks {
		t.Errorf("calibration: run %q, checks/s %v, errors %v, admitted %d of %d; want a clean positive ceiling",
			r.Run, r.ChecksPerSecond, r.Errors, r.Admitted, r.Checks)
	}
}

// The judge catches over-admission: the calibration server admits
// everything, so every algorithm is over its bound.
func TestAccuracyJudgeCatchesAnAdmitAllServer(t *testing.T) {
	t.Parallel()
	r := runJSON(t, "--calibrate", "--mode", "accuracy", "--algorithm", "FIXED_WINDOW",
		"--duration", "300ms", "--limit", "2", "--period", "100ms", "--keys", "2")
	if r.OverAdmittedPct == nil || *r.OverAdmittedPct < 100 {
		t.Errorf("over_admitted_pct = %v against an admit-all server at 5.3× the limit; want ≥ 100", r.OverAdmittedPct)
	}
}

// A target that is down is reported with its address within seconds.
func TestTargetDownIsReportedQuickly(t *testing.T) {
	t.Parallel()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refused := lis.Addr().String()
	lis.Close()
	silent, err := net.Listen("tcp", "127.0.0.1:0") // accepts, never speaks gRPC
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	for _, addr := range []string{refused, silent.Addr().String()} {
		var stdout, stderr bytes.Buffer
		start := time.Now()
		code := run(context.Background(), []string{"--targets", addr, "--duration", "30s"}, &stdout, &stderr)
		if code != exitFail || !strings.Contains(stderr.String(), addr) || time.Since(start) > probeTimeout+5*time.Second {
			t.Errorf("target %s down: exit %d after %v, stderr %q; want exit 1 naming it within %v", addr, code, time.Since(start), stderr.String(), probeTimeout+5*time.Second)
		}
	}
}

// Stopping the local cluster (here: the caller's context ends, as on
// Ctrl-C) leaves no server process behind.
func TestLocalClusterLeavesNoProcess(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	c, err := startLocal(ctx, 2, serverBin(t), nil, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	var pids []int
	for _, nd := range c.nodes {
		pids = append(pids, nd.cmd.Process.Pid)
	}
	cancel()
	c.stop()
	for _, pid := range pids {
		if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
			t.Errorf("server pid %d still exists after stop: kill(0) = %v", pid, err)
		}
	}
}

func TestLineWatchWaitsForAWholeLine(t *testing.T) {
	t.Parallel()
	found := make(chan string, 1)
	w := &lineWatch{prefix: "serving ", found: found}
	for _, chunk := range []string{"starting\nserv", "ing node=a http=127.0.0.1:1 gr", "pc=127.0.0.1:2", "\nlater\n"} {
		w.Write([]byte(chunk))
	}
	if got := <-found; got != "serving node=a http=127.0.0.1:1 grpc=127.0.0.1:2" {
		t.Errorf("found %q", got)
	}
	if got := field("serving node=a http=h:1 grpc=g:2", "grpc="); got != "g:2" {
		t.Errorf("field(grpc=) = %q", got)
	}
}
