package main

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"os"
	"slices"
	"sync"
	"time"
)

// leaveWithin bounds a graceful leave: a node still running this long
// after SIGTERM is killed, and the event reported as failed. It covers the
// server's own bounds (handoff timeout, drain of requests in flight).
const leaveWithin = 30 * time.Second

// churnSignal is a signal the churn runner sends a node's process group
// (proc_unix.go maps them).
type churnSignal int

const (
	sigTerm churnSignal = iota
	sigKill
	sigStop
	sigCont
)

// churnRecord is one churn event as it happened; times are seconds from
// the start of the algorithm's run.
type churnRecord struct {
	Event    string  `json:"event"` // join, leave, kill, restart, stop, cont
	Node     int     `json:"node"`  // 1-based in start order
	Name     string  `json:"name"`
	PlannedS float64 `json:"planned_s"`
	AtS      float64 `json:"at_s"`
	TookS    float64 `json:"took_s"`  // until exited (leave, kill) or ready (join, restart)
	Outcome  string  `json:"outcome"` // "exit 0", "signal: killed", "ready", "SIGSTOP", "SIGCONT" or "failed"
	Detail   string  `json:"detail,omitempty"`
	Error    string  `json:"error,omitempty"`
}

// churnReport is what the churn of one algorithm's run did.
type churnReport struct {
	Events []churnRecord `json:"events"`
	// ConvergedS is when, after the last event, every running node listed
	// exactly the running nodes again; nil when it did not within
	// convergeWithin (ConvergeError says why) or the run was cut short.
	ConvergedS    *float64 `json:"converged_s"`
	ConvergeError string   `json:"converge_error,omitempty"`
}

// failed reports whether an event or the convergence after them failed.
func (r *churnReport) failed() bool {
	return r.ConvergeError != "" || slices.ContainsFunc(r.Events, func(e churnRecord) bool { return e.Error != "" })
}

// churner applies a schedule to a local cluster. Events run one at a time
// in the calling goroutine (an event that takes long, such as a slow
// leave, delays the next, whose actual time is reported); the SIGCONT of
// each stop runs in its own goroutine, so that it comes on time.
type churner struct {
	c     *localCluster
	start time.Time
	conts sync.WaitGroup

	mu  sync.Mutex // guards what follows; held while logging
	log io.Writer
	rep churnReport
}

// runChurn applies events to c at start + their offsets, then waits for
// the cluster to converge, and reports what happened. It returns when
// every event is done and every stopped node continued, even when ctx
// ends first.
func runChurn(ctx context.Context, c *localCluster, events []churnEvent, start time.Time, log io.Writer) *churnReport {
	ch := &churner{c: c, start: start, log: log}
	for _, e := range events {
		if !sleepUntil(ctx, start.Add(e.at)) {
			break
		}
		rec := ch.apply(ctx, e)
		ch.record(rec)
	}
	ch.conts.Wait()
	slices.SortStableFunc(ch.rep.Events, func(a, b churnRecord) int { return cmp.Compare(a.AtS, b.AtS) })
	if ctx.Err() != nil {
		return &ch.rep
	}
	if err := c.converge(ctx, convergeWithin); err != nil {
		ch.rep.ConvergeError = err.Error()
		ch.logf("convergence FAILED: %v", err)
	} else {
		ch.rep.ConvergedS = ptr(ch.offset(time.Now()))
		ch.logf("converged: every running node lists exactly the running nodes")
	}
	return &ch.rep
}

// apply performs one event and says how it went.
func (ch *churner) apply(ctx context.Context, e churnEvent) churnRecord {
	at := time.Now()
	rec := churnRecord{Event: e.kind, Node: e.node, Name: nodeName(e.node), PlannedS: e.at.Seconds(), AtS: ch.offset(at)}
	var err error
	switch e.kind {
	case churnJoin, churnRestart:
		rec.Detail, err = ch.startNode(e)
		rec.Outcome = "ready"
	case churnLeave:
		rec.Outcome, err = ch.signalAndWait(ctx, e.node, sigTerm, leaveWithin)
	case churnKill:
		rec.Outcome, err = ch.signalAndWait(ctx, e.node, sigKill, leaveWithin)
	case churnStop:
		err = ch.stop(ctx, e, at)
		rec.Outcome, rec.Detail = "SIGSTOP", fmt.Sprintf("for %v", e.pause)
	}
	rec.TookS = time.Since(at).Seconds()
	if err != nil {
		rec.Outcome, rec.Error = "failed", err.Error()
	}
	return rec
}

// running returns node num when its process is running.
func (ch *churner) running(num int) (*localNode, error) {
	if num > len(ch.c.nodes) {
		return nil, fmt.Errorf("node %d was never started (an earlier join failed)", num)
	}
	if nd := ch.c.nodes[num-1]; nd.running() {
		return nd, nil
	}
	return nil, fmt.Errorf("node %d is not running", num)
}

// startNode joins a new node or restarts one that left or was killed.
func (ch *churner) startNode(e churnEvent) (string, error) {
	var prev *localNode
	if e.kind == churnJoin {
		if e.node != len(ch.c.nodes)+1 {
			return "", fmt.Errorf("node %d cannot be numbered %d (an earlier join failed)", len(ch.c.nodes)+1, e.node)
		}
	} else if prev = ch.c.nodes[e.node-1]; prev.running() {
		return "", fmt.Errorf("node %d is still running", e.node)
	}
	nd, same, err := ch.c.launch(e.node, prev)
	if err != nil {
		return "", err
	}
	addrs := fmt.Sprintf("grpc=%s http=%s gossip=%s", nd.grpc, nd.http, nd.gossip)
	if e.kind == churnJoin {
		ch.c.nodes = append(ch.c.nodes, nd)
		return addrs, nil
	}
	ch.c.nodes[e.node-1] = nd
	if same {
		return "same addresses", nil
	}
	return "new addresses, the old ones were taken: " + addrs, nil
}

// signalAndWait sends sig to node num and waits up to within for it to
// exit; a node still running then is killed and the event fails.
func (ch *churner) signalAndWait(ctx context.Context, num int, sig churnSignal, within time.Duration) (string, error) {
	nd, err := ch.running(num)
	if err != nil {
		return "", err
	}
	if err := signalGroup(nd.cmd, sig); err != nil {
		return "", err
	}
	timer := time.NewTimer(within)
	defer timer.Stop()
	select {
	case <-nd.exited:
		return exitText(nd.cmd.ProcessState), nil
	case <-timer.C:
		signalGroup(nd.cmd, sigKill)
		<-nd.exited
		return exitText(nd.cmd.ProcessState), fmt.Errorf("still running %v after the signal: killed", within)
	case <-ctx.Done():
		return "", ctx.Err()
	}
}

// stop sends SIGSTOP to the node and starts the goroutine that sends
// SIGCONT pause after at, or at once when ctx ends.
func (ch *churner) stop(ctx context.Context, e churnEvent, at time.Time) error {
	nd, err := ch.running(e.node)
	if err != nil {
		return err
	}
	if err := signalGroup(nd.cmd, sigStop); err != nil {
		return err
	}
	ch.conts.Go(func() {
		sleepUntil(ctx, at.Add(e.pause))
		cont := time.Now()
		rec := churnRecord{Event: churnCont, Node: e.node, Name: nd.name, PlannedS: (e.at + e.pause).Seconds(), AtS: ch.offset(cont),
			Outcome: "SIGCONT", Detail: fmt.Sprintf("after %.2fs stopped", cont.Sub(at).Seconds())}
		if err := signalGroup(nd.cmd, sigCont); err != nil {
			rec.Error = err.Error()
		}
		ch.record(rec)
	})
	return nil
}

// record keeps rec and logs it.
func (ch *churner) record(rec churnRecord) {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	ch.rep.Events = append(ch.rep.Events, rec)
	fmt.Fprintf(ch.log, "loadtest: %.3fs %s node %d (%s)\n", rec.AtS, rec.Event, rec.Node, rec.describe())
}

// describe says how an event went: "exit 0 after 0.31s", "ready after
// 0.52s; same addresses", "SIGSTOP for 10s", "FAILED after 20.00s: …".
func (rec *churnRecord) describe() string {
	if rec.Error != "" {
		return fmt.Sprintf("FAILED after %.2fs: %s", rec.TookS, rec.Error)
	}
	s := rec.Outcome
	if rec.Event == churnStop || rec.Event == churnCont {
		return s + " " + rec.Detail
	}
	s += fmt.Sprintf(" after %.2fs", rec.TookS)
	if rec.Detail != "" {
		s += "; " + rec.Detail
	}
	return s
}

func (ch *churner) logf(format string, a ...any) {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	fmt.Fprintf(ch.log, "loadtest: %.3fs "+format+"\n", append([]any{ch.offset(time.Now())}, a...)...)
}

func (ch *churner) offset(t time.Time) float64 { return t.Sub(ch.start).Seconds() }

// exitText describes how a process ended: "exit 0", "signal: killed".
func exitText(ps *os.ProcessState) string {
	if ps.Exited() {
		return fmt.Sprintf("exit %d", ps.ExitCode())
	}
	return ps.String()
}
