package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"
)

// --mode idle: what a node costs when nobody calls it.
//
// It starts a --local cluster, optionally loads it for --idle-load with
// the throughput flags (then leaves it alone), waits --idle-settle, and
// reads each node's CPU time at the start and the end of a --duration
// window, two ways: utime + stime of /proc/<pid>/stat, in clock ticks of
// 10 ms, and the run time of each of its threads from
// /proc/<pid>/task/<tid>/schedstat, in nanoseconds (an idle node uses a
// few ticks per 20 s, so the ticks alone round by tens of percent). The
// figure per node is what it used in the window: the timers, probes and
// runtime housekeeping of a node with nothing to do. Nothing talks to
// the nodes during the window, not even a metrics scrape, which would be
// a wake-up of its own.
//
//	go run ./loadtest --mode idle --local 3 --duration 20s            # 10 s after forming
//	go run ./loadtest --mode idle --local 3 --idle-load 5s --duration 20s

// idleReport is the result of --mode idle; --json writes it as is.
type idleReport struct {
	Mode      string     `json:"mode"`
	Nodes     int        `json:"local_nodes"`
	ExtraArgs []string   `json:"server_flags,omitempty"`
	LoadS     float64    `json:"load_s"`   // the load before, 0 for none
	SettleS   float64    `json:"settle_s"` // the wait after forming or load
	WindowS   float64    `json:"window_s"` // measured, start to end
	PerNode   []idleNode `json:"nodes"`
	Load      *result    `json:"load,omitempty"`
}

// idleNode is one node's CPU over the window.
type idleNode struct {
	Name       string  `json:"name"`
	Ticks      int64   `json:"ticks"`         // 10 ms ticks, user + system
	CPUMs      float64 `json:"cpu_ms"`        // on-CPU time of its threads (schedstat)
	CorePct    float64 `json:"core_pct"`      // CPUMs, of one core over the window
	TicksPer20 float64 `json:"ticks_per_20s"` // the ticks, scaled to 20 s
	MsPer20    float64 `json:"cpu_ms_per_20s"`
}

// runIdle measures the idle CPU of a --local cluster of bin.
func runIdle(ctx context.Context, cfg *config, bin string, stderr io.Writer) (*idleReport, error) {
	log := progressWriter(cfg, stderr)
	cl, err := startLocal(ctx, cfg.local, bin, cfg.localFlags, log)
	if err != nil {
		return nil, fmt.Errorf("local cluster: %w", err)
	}
	defer cl.stop()
	rep := &idleReport{Mode: modeIdle, Nodes: cfg.local, ExtraArgs: cfg.localFlags,
		LoadS: cfg.idleLoad.Seconds(), SettleS: cfg.idleSettle.Seconds()}
	if cfg.idleLoad > 0 {
		lc := *cfg
		lc.mode, lc.duration = modeThroughput, cfg.idleLoad
		fmt.Fprintf(log, "loadtest: load for %v\n", cfg.idleLoad)
		if rep.Load, err = measure(ctx, &lc, cl.grpcAddrs(), cl.httpAddrs(), stderr); err != nil {
			return nil, fmt.Errorf("load: %w", err)
		}
		httpClient.CloseIdleConnections()
	}
	fmt.Fprintf(log, "loadtest: settling for %v, then measuring for %v\n", cfg.idleSettle, cfg.duration)
	if err := sleepCtx(ctx, cfg.idleSettle); err != nil {
		return nil, err
	}
	before, start, err := readCPU(cl)
	if err != nil {
		return nil, err
	}
	if err := sleepCtx(ctx, cfg.duration); err != nil {
		return nil, err
	}
	after, end, err := readCPU(cl)
	if err != nil {
		return nil, err
	}
	window := end.Sub(start).Seconds()
	rep.WindowS = window
	for i, nd := range cl.nodes {
		ticks := after[i].ticks - before[i].ticks
		ms := float64(after[i].runNS-before[i].runNS) / 1e6
		rep.PerNode = append(rep.PerNode, idleNode{Name: nd.name, Ticks: ticks, CPUMs: ms,
			CorePct:    100 * ms / 1e3 / window,
			TicksPer20: float64(ticks) * 20 / window,
			MsPer20:    ms * 20 / window})
	}
	return rep, nil
}

// cpuTime is a process's CPU time so far, both ways.
type cpuTime struct {
	ticks int64 // utime + stime, clock ticks
	runNS int64 // its threads' run time, ns
}

// readCPU reads every node's CPU time so far, and when.
func readCPU(cl *localCluster) ([]cpuTime, time.Time, error) {
	var out []cpuTime
	for _, nd := range cl.nodes {
		if !nd.running() {
			return nil, time.Time{}, fmt.Errorf("%s: %w", nd.name, errExited)
		}
		pid := nd.cmd.Process.Pid
		t, err := procTicks(pid)
		if err != nil {
			return nil, time.Time{}, err
		}
		ns, err := procRunNS(pid)
		if err != nil {
			return nil, time.Time{}, err
		}
		out = append(out, cpuTime{ticks: t, runNS: ns})
	}
	return out, time.Now(), nil
}

// procRunNS returns how long the threads of process pid have run, in ns:
// the first field of each /proc/<pid>/task/<tid>/schedstat. A thread that
// exits takes its time with it; Go's threads rarely exit.
func procRunNS(pid int) (int64, error) {
	dir := "/proc/" + strconv.Itoa(pid) + "/task"
	tasks, err := os.ReadDir(dir)
	if err != nil {
		return 0, fmt.Errorf("idle mode reads /proc (Linux only): %w", err)
	}
	var sum int64
	for _, task := range tasks {
		b, err := os.ReadFile(dir + "/" + task.Name() + "/schedstat")
		if errors.Is(err, os.ErrNotExist) {
			continue // the thread exited meanwhile
		}
		if err != nil {
			return 0, err
		}
		ns, err := parseSchedstat(string(b))
		if err != nil {
			return 0, err
		}
		sum += ns
	}
	return sum, nil
}

// parseSchedstat parses a schedstat line: time on the CPU (ns), time
// waiting to run (ns), timeslices run.
func parseSchedstat(line string) (int64, error) {
	f := strings.Fields(line)
	if len(f) != 3 {
		return 0, fmt.Errorf("schedstat: want 3 fields, got %q", line)
	}
	v, err := strconv.ParseInt(f[0], 10, 64)
	if err != nil || v < 0 {
		return 0, fmt.Errorf("schedstat: bad run time %q", f[0])
	}
	return v, nil
}

// procTicks returns utime + stime of process pid, in clock ticks, from
// /proc/<pid>/stat.
func procTicks(pid int) (int64, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, fmt.Errorf("idle mode reads /proc (Linux only): %w", err)
	}
	return parseStatTicks(string(b))
}

// parseStatTicks parses a /proc/<pid>/stat line: utime and stime are
// fields 14 and 15, counted from the pid; the command name (field 2) is in
// parentheses and may hold spaces, so fields are counted after its ')'.
func parseStatTicks(stat string) (int64, error) {
	i := strings.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, errors.New("/proc stat: no command name")
	}
	f := strings.Fields(stat[i+1:]) // f[0] is field 3, the state
	if len(f) < 13 {
		return 0, errors.New("/proc stat: too few fields")
	}
	var sum int64
	for _, s := range f[11:13] {
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc stat: bad time %q", s)
		}
		sum += v
	}
	return sum, nil
}

// sleepCtx waits d, or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// writeIdle writes rep as text, or as JSON with asJSON.
func writeIdle(w io.Writer, rep *idleReport, asJSON bool) error {
	if asJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "idle CPU of %d local node(s)", rep.Nodes)
	if len(rep.ExtraArgs) > 0 {
		fmt.Fprintf(&b, " (%s)", strings.Join(rep.ExtraArgs, " "))
	}
	if rep.LoadS > 0 {
		fmt.Fprintf(&b, ", %.0f s after %.0f s of load", rep.SettleS, rep.LoadS)
		if rep.Load != nil {
			fmt.Fprintf(&b, " (%.0f checks/s)", rep.Load.ChecksPerSecond)
		}
	} else {
		fmt.Fprintf(&b, ", %.0f s after forming", rep.SettleS)
	}
	fmt.Fprintf(&b, ", over %.1f s:\n", rep.WindowS)
	for _, n := range rep.PerNode {
		fmt.Fprintf(&b, "  %-12s %6.1f ms on CPU  %5.2f%% of a core  %5.1f ms per 20 s  (%d ticks of 10 ms, %.1f per 20 s)\n",
			n.Name, n.CPUMs, n.CorePct, n.MsPer20, n.Ticks, n.TicksPer20)
	}
	_, err := io.WriteString(w, b.String())
	return err
}
