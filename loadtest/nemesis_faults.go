package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/shardlimiter/shardlimiter/internal/netns"
	"github.com/shardlimiter/shardlimiter/loadtest/nemesis"
)

// injector applies a fault schedule to a local cluster, each fault in a
// goroutine of its own so that they overlap. Process faults of one node
// take that node's lock, an allstop takes them all: a fault whose node is
// still busy starts late, and its actual start is reported.
type injector struct {
	c         *localCluster
	lab       *netns.Lab // nil: no network faults
	netem     bool       // the kernel has tc netem
	stateDirs []string   // per node (0-based)
	scr       *nemesis.Scraper
	start     time.Time
	log       io.Writer

	mu     sync.Mutex // guards c.nodes while faults replace nodes
	nodeMu []sync.Mutex
	logMu  sync.Mutex
	// down[i]: node i+1 was signalled to exit and is not ready again yet.
	// The load leaves it out, as a load balancer behind readiness probes
	// would: a node that answers before it has joined decides every key
	// alone, uncounted (docs/RELIABILITY.md, "Deviations found").
	down []atomic.Bool
}

// ready reports whether node i (0-based) takes calls.
func (in *injector) ready(i int) bool { return !in.down[i].Load() }

// node returns node num (1-based).
func (in *injector) node(num int) *localNode {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.c.nodes[num-1]
}

// running returns the nodes whose processes run, nil for the others.
func (in *injector) running() []*localNode {
	in.mu.Lock()
	defer in.mu.Unlock()
	out := make([]*localNode, len(in.c.nodes))
	for i, nd := range in.c.nodes {
		if nd.running() {
			out[i] = nd
		}
	}
	return out
}

// targets returns what the scraper reads of each node; a zero PID where
// the node is down.
func (in *injector) targets() []nemesis.Target {
	out := make([]nemesis.Target, len(in.c.nodes))
	for i, nd := range in.running() {
		if nd != nil {
			out[i] = nemesis.Target{HTTP: nd.http, PID: nd.cmd.Process.Pid}
		}
	}
	return out
}

// run applies every fault at its planned time and returns when all are
// over (ctx's end cuts the waits short, never a restart).
func (in *injector) run(ctx context.Context, faults []nemesis.Fault) {
	var wg sync.WaitGroup
	for i := range faults {
		f := &faults[i]
		wg.Go(func() {
			if !sleepUntil(ctx, in.start.Add(time.Duration(f.AtS*1e9))) {
				f.Error = "the run ended first"
				return
			}
			in.apply(ctx, f)
		})
	}
	wg.Wait()
}

// apply performs f, fills its actual times and logs it.
func (in *injector) apply(ctx context.Context, f *nemesis.Fault) {
	hold := func() { sleepCtx(ctx, time.Duration(f.ForS*1e9)) }
	var err error
	switch f.Kind {
	case nemesis.Kill, nemesis.Term, nemesis.Corrupt, nemesis.Stop:
		err = in.process(ctx, f, hold)
	case nemesis.AllStop:
		err = in.allStop(ctx, f, hold)
	case nemesis.Partition:
		err = in.network(f, hold, func(name string) error {
			return in.lab.Drop(name, [2][]int{idx(f.Nodes), idx(f.Others)}, [2][]int{idx(f.Others), idx(f.Nodes)})
		},
			in.lab.Undrop)
	case nemesis.OneWay:
		err = in.network(f, hold, func(name string) error { return in.lab.Drop(name, [2][]int{idx(f.Nodes), idx(f.Others)}) }, in.lab.Undrop)
	case nemesis.Netem:
		err = in.network(f, hold, in.slowOn(f), in.slowOff(f))
	case nemesis.DiskFull:
		err = in.diskFull(f, hold)
	}
	f.EndS = in.offset()
	if err != nil {
		f.Error = err.Error()
	}
	in.logMu.Lock()
	fmt.Fprintf(in.log, "loadtest: %.1fs–%.1fs %s %s\n", f.StartS, f.EndS, f.Kind, f.Describe())
	in.logMu.Unlock()
}

func (in *injector) offset() float64 { return time.Since(in.start).Seconds() }

// idx turns 1-based node numbers into 0-based indices.
func idx(nodes []int) []int {
	out := make([]int, len(nodes))
	for i, n := range nodes {
		out[i] = n - 1
	}
	return out
}

// process kills (SIGKILL, SIGTERM) and restarts one node, damaging its
// snapshot in between for a corrupt fault, or stops and continues it.
func (in *injector) process(ctx context.Context, f *nemesis.Fault, hold func()) error {
	num := f.Nodes[0]
	in.nodeMu[num-1].Lock()
	defer in.nodeMu[num-1].Unlock()
	f.StartS = in.offset()
	nd := in.node(num)
	if !nd.running() {
		return fmt.Errorf("node %d is not running", num)
	}
	in.scr.PeakRSS(num-1, nd.cmd.Process.Pid)
	if f.Kind == nemesis.Stop {
		if err := signalGroup(nd.cmd, sigStop); err != nil {
			return err
		}
		hold()
		return signalGroup(nd.cmd, sigCont)
	}
	sig := sigKill
	if f.Kind == nemesis.Term {
		sig = sigTerm
	}
	in.down[num-1].Store(true)
	err := killAndWait(nd, sig)
	if err == nil && f.Kind == nemesis.Corrupt {
		err = corruptSnapshot(filepath.Join(in.stateDirs[num-1], nodeName(num)+".snapshot"))
	}
	hold()
	return errors.Join(err, in.restart(num, nd))
}

// killAndWait signals nd and waits for its exit; after leaveWithin it is
// killed and the wait reported as failed.
func killAndWait(nd *localNode, sig churnSignal) error {
	if err := signalGroup(nd.cmd, sig); err != nil {
		return err
	}
	select {
	case <-nd.exited:
		return nil
	case <-time.After(leaveWithin):
		signalGroup(nd.cmd, sigKill)
		<-nd.exited
		return fmt.Errorf("%s still running %v after the signal: killed", nd.name, leaveWithin)
	}
}

// restart starts node num again (its previous process prev) and puts it
// in place.
func (in *injector) restart(num int, prev *localNode) error {
	nd, _, err := in.c.launch(num, prev)
	if err != nil {
		return fmt.Errorf("restart of node %d: %w", num, err)
	}
	in.mu.Lock()
	in.c.nodes[num-1] = nd
	in.mu.Unlock()
	in.down[num-1].Store(false)
	return nil
}

// allStop sends SIGTERM to every node at once, waits for every exit, and
// restarts them all at once (each joins whichever others are back).
func (in *injector) allStop(ctx context.Context, f *nemesis.Fault, hold func()) error {
	for i := range in.nodeMu {
		in.nodeMu[i].Lock()
		defer in.nodeMu[i].Unlock()
	}
	f.StartS = in.offset()
	nodes := in.running()
	errs := make([]error, len(nodes))
	var wg sync.WaitGroup
	for i, nd := range nodes {
		in.down[i].Store(true)
		if nd != nil {
			in.scr.PeakRSS(i, nd.cmd.Process.Pid)
			wg.Go(func() { errs[i] = killAndWait(nd, sigTerm) })
		}
	}
	wg.Wait()
	hold()
	for i := range nodes {
		wg.Go(func() { errs[i] = errors.Join(errs[i], in.restart(i+1, in.node(i+1))) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// network applies a network fault through on (given a table name of its
// own), holds it, and removes it through off.
func (in *injector) network(f *nemesis.Fault, hold func(), on, off func(name string) error) error {
	f.StartS = in.offset()
	name := fmt.Sprintf("nemesis_%s_%d", f.Kind, int(f.AtS*1000))
	if err := on(name); err != nil {
		return err
	}
	hold()
	return off(name)
}

// slowOn returns how a netem fault starts: tc netem, or where the kernel
// has none a token-bucket qdisc whose queue delays the node's packets and
// an nftables loss on the switch (f.Netem says which).
func (in *injector) slowOn(f *nemesis.Fault) func(name string) error {
	i := f.Nodes[0] - 1
	if in.netem {
		return func(string) error { return in.lab.Netem(i, strings.Fields(f.Netem)...) }
	}
	latency := fmt.Sprintf("%dms", f.Delay+f.Jitter)
	f.Netem = fmt.Sprintf("tbf rate %s latency %s, loss %d%% (no netem in this kernel)", throttleRate, latency, f.Loss)
	return func(name string) error { return in.lab.Throttle(name, i, throttleRate, latency, f.Loss) }
}

// throttleRate is the link rate of a netem fault without netem.
const throttleRate = "512kbit"

// slowOff returns how a netem fault ends.
func (in *injector) slowOff(f *nemesis.Fault) func(name string) error {
	i := f.Nodes[0] - 1
	return func(name string) error {
		err := in.lab.NetemOff(i)
		if !in.netem {
			err = errors.Join(err, in.lab.Undrop(name))
		}
		return err
	}
}

// diskFull fills the tmpfs under a node's state dir, holds, and frees it.
func (in *injector) diskFull(f *nemesis.Fault, hold func()) error {
	f.StartS = in.offset()
	path := filepath.Join(in.stateDirs[f.Nodes[0]-1], "nemesis-filler")
	fill, err := os.Create(path)
	if err != nil {
		return err
	}
	chunk := make([]byte, 1<<20)
	for err == nil {
		_, err = fill.Write(chunk)
	}
	fill.Close()
	hold()
	return os.Remove(path)
}

// corruptSnapshot flips 64 bytes in the middle of a snapshot file: the
// node must refuse it whole at its next start.
func corruptSnapshot(path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("corrupt: %w", err)
	}
	mid := len(b) / 2
	for i := mid; i < min(mid+64, len(b)); i++ {
		b[i] ^= 0xa5
	}
	return os.WriteFile(path, b, 0o600)
}
