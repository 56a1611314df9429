// Command simulate runs clusters of real shardlimiter nodes in one process
// (package sim: the real ring, peer.Node and memberlist, on in-memory
// networks) and prints what each size costs, one column per cluster size:
//
//	go run ./cmd/simulate -n 3,10,30 -k 10000
//
// See docs/SCALING.md for what each row means and the figures measured.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime/pprof"
	"strconv"
	"strings"
	"time"

	"github.com/shardlimiter/shardlimiter/gossip"
	"github.com/shardlimiter/shardlimiter/ring"
	"github.com/shardlimiter/shardlimiter/sim"
)

func main() {
	if err := run(os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "simulate:", err)
		os.Exit(1)
	}
}

// config is the command line.
type config struct {
	sizes      []int
	cpuProfile string
	opt        sim.Options
	params     sim.Params
}

func parse(args []string, stderr io.Writer) (config, error) {
	fs := flag.NewFlagSet("simulate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	sizes := fs.String("n", "3,5", "cluster sizes to run, comma-separated, each a cluster of its own")
	k := fs.Int("k", 10_000, "keys of state, one hit each, before the scenarios")
	scen := fs.String("scenario", "", "scenarios, comma-separated, in order: idle, forward, replicate, join, leave, crash, partition, restart (rolling); empty: all but restart")
	seed := fs.Uint64("seed", 1, "seed of the keys and of every choice of member")
	latency := fs.Duration("latency", 0, "delay of each node-to-node call and gossip packet")
	window := fs.Duration("window", 5*time.Second, "how long idle and replicate measure")
	rate := fs.Int("rate", 1000, "checks per second of replicate (random keys of the k)")
	repl := fs.Duration("replication", 100*time.Millisecond, "replication interval (0: off)")
	timeout := fs.Duration("timeout", 60*time.Second, "longest wait for one agreement")
	ringOnly := fs.Bool("ring-only", false, "measure the ring alone (rebuild, spread, keys moved by a join) with no members running: sizes the machine cannot run")
	parts := fs.Int("ring-partitions", 0, "ring.Config.PartitionCount (0: the default, 4093); every figure uses it")
	vnodes := fs.Int("ring-vnodes", 0, "ring.Config.ReplicationFactor (0: the default, 100)")
	load := fs.Float64("ring-load", 0, "ring.Config.Load (0: the default, 1.05)")
	gossipEvery := fs.Duration("gossip-interval", 0, "gossip.Config.GossipInterval of every member (0: the default, 500 ms)")
	gossipNodes := fs.Int("gossip-nodes", 0, "gossip.Config.GossipNodes of every member (0: the default, 3)")
	gossipOnly := fs.Bool("gossip-only", false, "run each member's gossip without its node: agreement on member lists, no checks (sizes whose ring rebuilds the machine cannot afford)")
	static := fs.Bool("static", false, "form with a fixed member list, no gossip: forward and replicate on a formed ring of any size")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the whole run to this `file`")
	logs := fs.Bool("logs", false, "print the nodes' warnings and errors to stderr")
	if err := fs.Parse(args); err != nil {
		return config{}, err
	}
	var cfg config
	for _, s := range strings.Split(*sizes, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 || n > 4096 {
			return config{}, fmt.Errorf("-n: %q is not a size of 1 to 4096", s)
		}
		cfg.sizes = append(cfg.sizes, n)
	}
	if *gossipOnly && *static {
		return config{}, fmt.Errorf("-gossip-only and -static: one or the other")
	}
	if *k < 1 {
		return config{}, fmt.Errorf("-k: %d: want at least 1 key", *k)
	}
	cfg.opt = sim.Options{Seed: *seed, Latency: *latency, ReplicationInterval: *repl,
		Ring: ring.Config{PartitionCount: *parts, ReplicationFactor: *vnodes, Load: *load}, GossipOnly: *gossipOnly}
	if *gossipEvery > 0 || *gossipNodes > 0 {
		cfg.opt.Gossip = func(c *gossip.Config) { c.GossipInterval, c.GossipNodes = *gossipEvery, *gossipNodes }
	}
	if *repl == 0 {
		cfg.opt.ReplicationInterval = -1
	}
	if *logs {
		cfg.opt.Logger = slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	cfg.cpuProfile = *cpuProfile
	cfg.params = sim.Params{K: *k, Window: *window, Rate: *rate, Timeout: *timeout, RingOnly: *ringOnly, Static: *static}
	if *scen != "" {
		cfg.params.Scenarios = strings.Split(*scen, ",")
	}
	return cfg, nil
}

func run(args []string, stdout, stderr io.Writer) error {
	cfg, err := parse(args, stderr)
	if err != nil {
		return err
	}
	if cfg.cpuProfile != "" {
		f, err := os.Create(cfg.cpuProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	return runSizes(ctx, cfg, stdout, stderr, sim.Run)
}

// runner runs one size: sim.Run, or (in the tests) sim.Run inside a
// synctest bubble.
type runner func(ctx context.Context, opt sim.Options, p sim.Params) (sim.Report, error)

// runSizes runs each size of cfg with one and writes the table.
func runSizes(ctx context.Context, cfg config, stdout, stderr io.Writer, one runner) error {
	var reports []sim.Report
	for _, n := range cfg.sizes {
		p := cfg.params
		p.N = n
		start := time.Now()
		opt := cfg.opt
		opt.Progress = func(step string, took time.Duration) {
			fmt.Fprintf(stderr, "N=%d: %s took %v\n", n, step, took.Round(time.Millisecond))
		}
		r, err := one(ctx, opt, p)
		if err != nil {
			return fmt.Errorf("n=%d: %w", n, err)
		}
		fmt.Fprintf(stderr, "N=%d done in %v\n", n, time.Since(start).Round(time.Second))
		for _, e := range r.Errors {
			fmt.Fprintf(stderr, "N=%d: %s\n", n, e)
		}
		reports = append(reports, r)
		if len(cfg.sizes) > 1 {
			// Each size's figures as soon as they are known: a long run
			// stopped later keeps them.
			sim.WriteTable(stderr, []sim.Report{r})
		}
		if ctx.Err() != nil {
			break
		}
	}
	sim.WriteTable(stdout, reports)
	return nil
}
