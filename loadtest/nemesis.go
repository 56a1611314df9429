package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"

	"github.com/shardlimiter/shardlimiter/internal/netns"
	"github.com/shardlimiter/shardlimiter/limit"
	"github.com/shardlimiter/shardlimiter/loadtest/nemesis"
)

// --mode nemesis: a --local cluster with --state-dir and replication,
// under a mixed closed-loop load (nemesis_load.go), while a seeded
// schedule of overlapping faults (package nemesis, nemesis_faults.go)
// kills, stops, cuts, slows and fills it; then a checker reads the whole
// history (package nemesis). docs/RELIABILITY.md is its manual.
const (
	modeNemesis        = "nemesis"
	nemesisDuration    = 60 * time.Second
	nemesisLimit       = 20
	nemesisWorkers     = 8
	nemesisNodeMemory  = 256 // MiB, each node's --max-memory
	nemesisSnapshotInt = "1s"
	nemesisTmpfsSize   = "16m" // the tmpfs under each state dir (root)
	// nemesisRPCTimeout is the calls' deadline: above the longest chain
	// of bounded waits one check may meet (README.md, "When a wait times
	// out"): its owner's and its stand-in's forwards (--peer-timeout, 1 s
	// each), a handoff wait (2 s), and a redirect's forward (1 s), so that
	// a running node answers every call in time, whatever the network does.
	nemesisRPCTimeout = 6 * time.Second
)

// applyNemesisDefaults fills the flags --mode nemesis gives its own
// defaults.
func (c *config) applyNemesisDefaults(set map[string]bool) {
	if !set["duration"] {
		c.duration = nemesisDuration
	}
	if !set["limit"] {
		c.rule.Limit = nemesisLimit
	}
	if !set["concurrency"] {
		c.concurrency = nemesisWorkers
	}
	if !set["local"] {
		c.local = 3
	}
	if !set["rpc-timeout"] {
		c.rpcTimeout = nemesisRPCTimeout
	}
}

// executeNemesis runs --mode nemesis and writes its report; the exit code
// is exitFail when the report lists a violation.
func executeNemesis(ctx context.Context, cfg *config, stdout, stderr io.Writer) int {
	defer httpClient.CloseIdleConnections()
	bin, cleanup, err := serverBinary(ctx, cfg.serverBin, progressWriter(cfg, stderr))
	if err != nil {
		fmt.Fprintf(stderr, "loadtest: local cluster: %v\n", err)
		return exitFail
	}
	defer cleanup()
	rep, err := runNemesis(ctx, cfg, bin, progressWriter(cfg, stderr))
	if err == nil {
		if cfg.json {
			enc := json.NewEncoder(stdout)
			enc.SetIndent("", "  ")
			err = enc.Encode(rep)
		} else {
			err = nemesis.WriteText(stdout, rep)
		}
	}
	if err != nil {
		fmt.Fprintf(stderr, "loadtest: %v\n", err)
		return exitFail
	}
	if len(rep.Violations) > 0 || ctx.Err() != nil {
		return exitFail
	}
	return exitOK
}

// nemesisRun is the machinery of one run, set up and torn down around it.
type nemesisRun struct {
	cfg       *config
	log       io.Writer
	dir       string // node logs and state dirs
	lab       *netns.Lab
	mounts    []string
	stateDirs []string
	logs      []*os.File // per node: its stderr, over every restart
	skipped   []string

	dialOptions []grpc.DialOption // the tool's, restored by teardown
	transport   http.RoundTripper
}

// runNemesis sets up, runs the load and the faults, and judges.
func runNemesis(ctx context.Context, cfg *config, bin string, log io.Writer) (*nemesis.Report, error) {
	if cfg.seed == 0 {
		cfg.seed = rand.Uint64()
	}
	r := &nemesisRun{cfg: cfg, log: log}
	defer r.teardown()
	if err := r.setup(); err != nil {
		return nil, err
	}
	c, err := startLocalWith(ctx, cfg.local, bin, cfg.localFlags, log, r.configure)
	if err != nil {
		return nil, fmt.Errorf("local cluster: %w", err)
	}
	defer c.discard()
	for _, nd := range c.nodes {
		c.seeds = append(c.seeds, nd.gossip)
	}
	ts, err := dialTargets(c.grpcAddrs(), 1)
	if err != nil {
		return nil, err
	}
	defer closeTargets(ts)
	if err := probe(ctx, ts, 1); err != nil {
		return nil, err
	}
	rep := r.newReport()
	ks := nemesis.NewKeySpace(runID(cfg.seed), cfg.ruleFor)
	rec := nemesis.NewRecorder(len(ks.Names))
	scr := nemesis.NewScraper(cfg.local, httpClient, httpScheme)
	in := &injector{c: c, lab: r.lab, netem: r.lab != nil && r.lab.HasNetem(), stateDirs: r.stateDirs, scr: scr, log: log, nodeMu: make([]sync.Mutex, cfg.local),
		down: make([]atomic.Bool, cfg.local)}
	faults := nemesis.Plan(cfg.seed, cfg.local, cfg.duration, r.kinds(), cfg.faultGap)
	fmt.Fprintf(log, "loadtest: nemesis seed %d: %d faults over %v\n", cfg.seed, len(faults), cfg.duration)
	start := r.drive(ctx, ts, ks, rec, scr, in, faults)
	rep.Faults = faults
	if full, at := rec.Full(); full {
		rep.RecordFull, rep.RecordFullS = true, float64(at-start.UnixNano())/1e9
	}
	rep.CountFaults()
	j := &nemesis.Judge{Start: start.UnixNano(), Keys: ks, Rec: rec, Hits: cfg.hits, Faults: rep.Faults, Rises: append(scr.Rises(), r.loggedFallbacks()...),
		Bound: bound, Replay: replayAttempts}
	j.Run(rep)
	r.finish(rep, scr)
	return rep, nil
}

// drive runs the load for --duration with the scraper and the faults
// alongside, and returns the load's start.
func (r *nemesisRun) drive(ctx context.Context, ts []*target, ks *nemesis.KeySpace, rec *nemesis.Recorder, scr *nemesis.Scraper, in *injector, faults []nemesis.Fault) time.Time {
	start := time.Now()
	in.start = start
	lctx, stopLoad := context.WithDeadline(ctx, start.Add(r.cfg.duration))
	defer stopLoad()
	sctx, stopScrape := context.WithCancel(ctx)
	var scraping, load sync.WaitGroup
	scraping.Go(func() { scr.Run(sctx, in.targets) })
	for w := range r.cfg.concurrency {
		nw := &nemesisWorker{ks: ks, ts: ts, ready: in.ready, rec: rec, hits: r.cfg.hits, rpcTO: r.cfg.rpcTimeout,
			rng: rand.New(rand.NewPCG(r.cfg.seed, uint64(w))), next: w}
		load.Go(func() { nw.run(lctx) })
	}
	in.run(ctx, faults)
	load.Wait()
	stopScrape()
	scraping.Wait()
	return start
}

// setup makes the state dirs (each on a small tmpfs as root), the node
// log files and, as root, the network namespaces.
func (r *nemesisRun) setup() (err error) {
	if r.dir, err = os.MkdirTemp("", "shardlimiter-nemesis-"); err != nil {
		return err
	}
	// A restarted node is reached again soon: gRPC's reconnect backoff
	// (1 s doubling to 2 min by default) would keep calls failing long
	// after the node is back. teardown restores the options.
	r.dialOptions, r.transport = dialOptions, httpClient.Transport
	dialOptions = append(slices.Clone(dialOptions), grpc.WithConnectParams(grpc.ConnectParams{
		Backoff:           backoff.Config{BaseDelay: 50 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 500 * time.Millisecond},
		MinConnectTimeout: time.Second,
	}))
	root := runtime.GOOS == "linux" && netns.Usable("tc") == nil
	for i := range r.cfg.local {
		dir := filepath.Join(r.dir, fmt.Sprintf("state-%d", i+1))
		if err := os.Mkdir(dir, 0o700); err != nil {
			return err
		}
		if root {
			if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+nemesisTmpfsSize, "tmpfs", dir).CombinedOutput(); err != nil {
				return fmt.Errorf("tmpfs for %s: %w: %s", dir, err, out)
			}
			r.mounts = append(r.mounts, dir)
		}
		r.stateDirs = append(r.stateDirs, dir)
		f, err := os.Create(filepath.Join(r.dir, fmt.Sprintf("node-%d.stderr", i+1)))
		if err != nil {
			return err
		}
		r.logs = append(r.logs, f)
	}
	if !root {
		why := "not root, or ip, nft or tc missing"
		if err := netns.Usable("tc"); err != nil {
			why = err.Error()
		}
		r.skipped = append(r.skipped, "partition, oneway, netem, diskfull: "+why)
		return nil
	}
	if r.lab, err = netns.New(fmt.Sprintf("slnm%d", os.Getpid()), r.cfg.local); err != nil {
		return err
	}
	r.useLab()
	return nil
}

// useLab makes every connection of the tool to a lab address open inside
// that node's namespace.
func (r *nemesisRun) useLab() {
	lab := r.lab
	dialer := func(ctx context.Context, addr string) (net.Conn, error) {
		host, _, _ := net.SplitHostPort(addr)
		if i := lab.NodeOf(host); i >= 0 {
			return netns.Dial(ctx, lab.NS(i), addr)
		}
		return new(net.Dialer).DialContext(ctx, "tcp", addr)
	}
	dialOptions = append(dialOptions, grpc.WithContextDialer(dialer))
	httpClient.Transport = &http.Transport{DialContext: func(ctx context.Context, _, addr string) (net.Conn, error) {
		return dialer(ctx, addr)
	}}
}

// configure sets the cluster's nodes up: namespaces, state dirs, logs.
func (r *nemesisRun) configure(c *localCluster) {
	c.lab = r.lab
	c.nodeFlags = func(num int) []string {
		return []string{"--state-dir=" + r.stateDirs[num-1], "--snapshot-interval=" + nemesisSnapshotInt,
			fmt.Sprintf("--max-memory=%dMiB", nemesisNodeMemory), "--replication-interval=100ms"}
	}
	c.stderrTo = func(num int) io.Writer { return r.logs[num-1] }
}

// kinds returns the fault kinds this run can inject.
func (r *nemesisRun) kinds() []string {
	var out []string
	for _, k := range nemesis.Kinds {
		if (r.lab != nil || !nemesis.NeedsRoot(k)) && (len(r.cfg.faults) == 0 || slices.Contains(r.cfg.faults, k)) {
			out = append(out, k)
		}
	}
	return out
}

func (r *nemesisRun) newReport() *nemesis.Report {
	rep := &nemesis.Report{Mode: modeNemesis, Seed: r.cfg.seed, Nodes: r.cfg.local, DurationS: r.cfg.duration.Seconds(),
		Namespaces: r.lab != nil, Skipped: r.skipped, Workers: r.cfg.concurrency,
		OverByAlgorithm: map[string]int64{}, OverByFault: map[string]int64{},
		MemoryBudget: nemesisNodeMemory << 20, FaultGapS: r.cfg.faultGap.Seconds()}
	for _, a := range nemesis.Algorithms {
		rep.Rules = append(rep.Rules, fmt.Sprint(r.cfg.ruleFor(a)))
	}
	rep.Rules = append(rep.Rules, fmt.Sprintf("keys per algorithm: %d hot (%.0f%% of the checks), %d cold; batches 1–%d; API native",
		nemesis.HotKeys, nemesis.HotShare*100, nemesis.ColdKeys, nemesis.MaxBatch))
	return rep
}

// finish adds what the nodes left: panics in their stderr, peak RSS; and
// the verdict.
func (r *nemesisRun) finish(rep *nemesis.Report, scr *nemesis.Scraper) {
	for i, f := range r.logs {
		f.Sync()
		rep.Panics = append(rep.Panics, grepPanics(f.Name(), i+1)...)
	}
	rep.PeakRSS = scr.PeakRSSes()
	rep.RSSWithin = true
	for _, b := range rep.PeakRSS {
		rep.RSSWithin = rep.RSSWithin && b <= rep.MemoryBudget
	}
	rep.OverAdmittedPct = pct(rep.OverAdmittedHits, rep.BoundHits)
	rep.UnderAdmittedPct = pct(rep.UnderAdmittedHits, rep.ExpectedHits)
	if rep.RecordFull {
		rep.Notes = append(rep.Notes, fmt.Sprintf("the load stopped early, at %.0fs: %d checks recorded", rep.RecordFullS, nemesis.MaxChecks))
	}
	rep.Notes = append(rep.Notes, "over-admission: per key, its worst span (100 ms grid, up to 20 s) against a single perfect limiter's bound (bounds.go); a span is covered by a counted fallback when a node's fallback or stand-in decisions rose (or it logged a failed forward) within 1 s of it, or a handoff was given up or taken from a replica from 1 s before to 10 s after it (docs/RELIABILITY.md)")
	rep.Verdict()
}

// warnLine matches a warning of a node's text log: its time and message.
var warnLine = regexp.MustCompile(`^time=(\S+) level=WARN msg="((?:[^"\\]|\\.)*)"`)

// loggedFallbacks reads the nodes' logs for the warnings of fallbacks and
// given-up handoffs: a node that exits takes its counts since the last
// scrape along, its log keeps them.
func (r *nemesisRun) loggedFallbacks() []nemesis.Rise {
	var out []nemesis.Rise
	for _, f := range r.logs {
		f.Sync()
		b, err := os.ReadFile(f.Name())
		if err != nil {
			continue
		}
		for line := range strings.Lines(string(b)) {
			m := warnLine.FindStringSubmatch(line)
			if m == nil || !(strings.Contains(m[2], "handoff") || strings.HasPrefix(m[2], "forward to")) {
				continue
			}
			kind := nemesis.LoggedFallback
			if strings.Contains(m[2], "handoff") {
				kind = nemesis.LoggedHandoff
			}
			if t, err := time.Parse(time.RFC3339Nano, m[1]); err == nil {
				out = append(out, nemesis.Rise{From: t.UnixNano(), To: t.UnixNano(), Counter: kind, By: 1})
			}
		}
	}
	return out
}

// grepPanics returns the lines of a node's stderr that start a panic or a
// fatal runtime error.
func grepPanics(path string, node int) []string {
	f, err := os.Open(path)
	if err != nil {
		return []string{fmt.Sprintf("node %d: its stderr: %v", node, err)}
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if line := sc.Text(); strings.Contains(line, "panic:") || strings.HasPrefix(line, "fatal error:") {
			out = append(out, fmt.Sprintf("node %d: %s", node, line))
		}
	}
	return out
}

// teardown removes what setup made.
func (r *nemesisRun) teardown() {
	if r.dir != "" {
		httpClient.CloseIdleConnections()
		dialOptions, httpClient.Transport = r.dialOptions, r.transport
	}
	for _, f := range r.logs {
		f.Close()
	}
	for _, m := range r.mounts {
		if out, err := exec.Command("umount", m).CombinedOutput(); err != nil {
			fmt.Fprintf(r.log, "loadtest: umount %s: %v: %s\n", m, err, out)
		}
	}
	if r.lab != nil {
		if err := r.lab.Close(); err != nil {
			fmt.Fprintf(r.log, "loadtest: %v\n", err)
		}
	}
	if r.dir != "" && !r.cfg.keepLogs {
		os.RemoveAll(r.dir)
	} else if r.dir != "" {
		fmt.Fprintf(r.log, "loadtest: node logs kept in %s\n", r.dir)
	}
}

// replayAttempts is expected (bounds.go) for the checker's attempts.
func replayAttempts(r limit.Rule, at []nemesis.Attempt) int64 {
	conv := make([]attempt, len(at))
	for i, a := range at {
		conv[i] = attempt{send: a.Send, recv: a.Recv, hits: a.Hits, admitted: a.Admitted}
		if a.Failed {
			conv[i].fail = failRPC
		}
	}
	return expected(r, conv)
}
