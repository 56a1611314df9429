// Command loadtest drives a running shardlimiter cluster through its
// public gRPC API (shardlimiter.v1.RateLimiter/GetRateLimits) and reports
// throughput, latency and admission accuracy.
//
//	go run ./loadtest --targets 10.0.0.1:8081,10.0.0.2:8081 --duration 30s
//	go run ./loadtest --local 3                  # builds and starts a 3-node cluster
//	go run ./loadtest --calibrate --local 1      # transport ceiling, then one node
//	go run ./loadtest --local 3 --mode accuracy --algorithm all
//
// # Method
//
// Closed loop (the default): --concurrency workers each send a batch of
// --batch checks and send the next as soon as the answer arrives. The
// offered load adapts to the server, which makes it the right tool for
// "how many checks per second can this cluster decide", but its latency
// hides queueing: while the server stalls, the workers wait instead of
// sending, so the requests that would have queued are never measured
// (coordinated omission). Its latency is from send to answer.
//
// Open loop (--rate checks/s): calls are due on a fixed schedule,
// start + n × batch/rate, whatever the answers. A free worker sends a call
// at its due time, or at once when it was due earlier (every worker was
// busy); latency is measured from the due time, so a stalled server is
// charged for the whole queue it caused. Sends that start more than 1 ms
// late and calls never sent before the drain deadline are reported: when
// there are many, the tool or the server could not keep the rate, and the
// latency figures say how far behind it fell.
//
// Latency is recorded per call in HDR-style log-linear histograms (about
// 0.4% relative error, constant memory) and reported as percentiles.
// Client CPU comes from getrusage; server CPU from each metrics target's
// process_cpu_seconds_total, scraped before and after the run, divided by
// the checks answered.
//
// --mode accuracy sends single checks for a few keys at a known pace (5.3×
// the limit per key), round-robin over every target so that most checks
// are forwarded, records the client's send and answer times, and compares
// the hits each key got admitted with the exact bound of the algorithm
// over the span of its decisions (accuracy.go and bounds.go define each
// bound). The owner's clock decides; the judge uses this machine's clock,
// so it is exact only when client and servers share a clock (--local)
// and otherwise off by the clock skew between the machines.
//
// --churn (accuracy mode, --local) changes the cluster's membership
// during each algorithm's run: at offsets from the run's start it joins a
// node, stops one gracefully (SIGTERM, then waits for its exit), kills one
// (SIGKILL), restarts one under its name and addresses, or pauses one
// (SIGSTOP, SIGCONT). Each algorithm gets a fresh cluster and replays the
// schedule, and the report adds, per algorithm, the events as they
// happened, when the cluster converged again, the checks that failed (item
// errors, RPC errors, calls past --rpc-timeout) and the key furthest over
// its bound:
//
//	go run ./loadtest --local 3 --entry-one --mode accuracy --algorithm TOKEN_BUCKET \
//	    --keys 300 --limit 30 --period 20s --rate 6000 --duration 32s \
//	    --churn 6s:join,14s:leave=2,22s:restart=2
//
// Local node i (1-based, in start order) listens on 127.0.0.(10+i), or on
// 127.0.0.1 where only that can be bound; ports are always picked fresh.
//
// --calibrate measures an in-process gRPC server that admits everything
// without deciding anything: the transport ceiling of this machine. With
// targets or --local it runs first, and the run's checks/s is reported as
// a ratio of it. With --calibrate-process that server runs as a process
// of its own (this binary again, with a node's transport settings), and
// its server CPU per check is read from its process_cpu_seconds_total as
// a node's is, so the bare transport and a node compare in one command:
//
//	go run ./loadtest --calibrate --calibrate-process --local 1 --batch 1
//
// --mode idle (--local) measures what the nodes cost when nobody calls
// them: each node's CPU ticks from /proc over --duration (default 20 s),
// --idle-settle (10 s) after the cluster formed, or after --idle-load of
// throughput load (idle.go):
//
//	go run ./loadtest --mode idle --local 3 --idle-load 5s --server-bin /path/to/shardlimiter
//
// --api rlqs plays Envoy instances against Envoy's quota service, each
// enforcing its assignment as Envoy's filter does and reporting every
// --rlqs-interval, and reports admitted ÷ limit, Jain's fairness index,
// convergence after --rlqs-shift and the capacity used (rlqsapi.go,
// docs/RLQS.md):
//
//	go run ./loadtest --api rlqs --local 3 --rlqs-interval 1s --rlqs-shift 8s:1000,1000,10,10,1000,1000 --duration 16s
//
// --mode nemesis (--local 3 to 5) runs the nodes with --state-dir and
// replication under a mixed closed-loop load (every algorithm, hot and
// cold keys, batches of 1 to 100) while a schedule drawn from --seed
// kills, stops, leaves and restarts them, damages their snapshots and, as
// root (network namespaces, nftables, tc, tmpfs), cuts, slows and fills
// them; then it judges every check against the bound of a single perfect
// limiter and attributes each excess to the faults in effect and the
// nodes' counted fallbacks (nemesis.go, package nemesis,
// docs/RELIABILITY.md):
//
//	go run ./loadtest --mode nemesis --local 3 --duration 60s --seed 42
//
// Exit codes: 0 done, 1 a target or the local cluster failed (nemesis: or
// a violation was found), 2 bad flags.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/pprof"
	"syscall"
)

// Exit codes.
const (
	exitOK    = 0
	exitFail  = 1
	exitUsage = 2
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run is main without the process: parse, measure, report.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == serveCalibrationArg { // --calibrate-process's child
		return serveCalibration(ctx, args[1:], stdout, stderr)
	}
	cfg, err := parseFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	if err != nil {
		if !errors.Is(err, errFlagParse) {
			fmt.Fprintf(stderr, "loadtest: %v\n(see loadtest -h)\n", err)
		}
		return exitUsage
	}
	stopProfile, err := startProfile(cfg.cpuProfile)
	if err != nil {
		fmt.Fprintf(stderr, "loadtest: %v\n", err)
		return exitFail
	}
	if cfg.mode == modeNemesis {
		defer stopProfile()
		return executeNemesis(ctx, cfg, stdout, stderr)
	}
	if cfg.mode == modeIdle {
		defer stopProfile()
		return executeIdle(ctx, cfg, stdout, stderr)
	}
	if cfg.api == apiRLQS {
		defer stopProfile()
		return executeRLQS(ctx, cfg, stdout, stderr)
	}
	rep, err := execute(ctx, cfg, stderr)
	stopProfile()
	if err != nil {
		fmt.Fprintf(stderr, "loadtest: %v\n", err)
		return exitFail
	}
	if cfg.json {
		err = writeJSON(stdout, rep)
	} else {
		err = writeSummary(stdout, rep)
	}
	if err != nil {
		fmt.Fprintf(stderr, "loadtest: %v\n", err)
		return exitFail
	}
	if rep.Interrupted || rep.ChurnFailed {
		return exitFail
	}
	return exitOK
}

// executeIdle runs --mode idle and writes its report.
func executeIdle(ctx context.Context, cfg *config, stdout, stderr io.Writer) int {
	defer httpClient.CloseIdleConnections()
	bin, cleanup, err := serverBinary(ctx, cfg.serverBin, progressWriter(cfg, stderr))
	if err != nil {
		fmt.Fprintf(stderr, "loadtest: local cluster: %v\n", err)
		return exitFail
	}
	defer cleanup()
	rep, err := runIdle(ctx, cfg, bin, stderr)
	if err == nil {
		err = writeIdle(stdout, rep, cfg.json)
	}
	if err != nil {
		fmt.Fprintf(stderr, "loadtest: %v\n", err)
		return exitFail
	}
	return exitOK
}

// startProfile starts a CPU profile of this process into path (none when
// path is empty) and returns the function that stops it.
func startProfile(path string) (stop func(), err error) {
	if path == "" {
		return func() {}, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}, nil
}
