package main

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Churn events (--churn), applied to the --local cluster during each
// algorithm's accuracy run.
const (
	churnJoin    = "join"    // start one more node, joining node 1
	churnLeave   = "leave"   // SIGTERM, wait for the exit: a graceful leave
	churnKill    = "kill"    // SIGKILL: a crash
	churnRestart = "restart" // start a node that left or was killed again
	churnStop    = "stop"    // SIGSTOP, SIGCONT after a pause: a hung node
	churnCont    = "cont"    // reported only: the SIGCONT ending a stop
)

// churnEvent is one planned event of --churn.
type churnEvent struct {
	at    time.Duration // from the start of the algorithm's run
	kind  string
	node  int           // 1-based in start order; join: the number the new node gets
	pause time.Duration // stop: how long the node stays stopped
	part  string        // as written in --churn, for messages
}

// parseChurn reads a --churn spec, "OFFSET:EVENT,…" with EVENT one of
// join, leave=I, kill=I, restart=I, stop=I/D, and checks it against a
// run of nodes nodes for duration (see planChurn). The events come back
// in time order (the spec's order for equal times), join numbered.
func parseChurn(spec string, nodes int, duration time.Duration) ([]churnEvent, error) {
	var events []churnEvent
	for part := range strings.SplitSeq(spec, ",") {
		part = strings.TrimSpace(part)
		e, err := parseChurnEvent(part)
		if err != nil {
			return nil, fmt.Errorf("--churn %q: %w", part, err)
		}
		events = append(events, e)
	}
	slices.SortStableFunc(events, func(a, b churnEvent) int { return cmp.Compare(a.at, b.at) })
	if err := planChurn(events, nodes, duration); err != nil {
		return nil, err
	}
	return events, nil
}

// parseChurnEvent reads one "OFFSET:EVENT" part.
func parseChurnEvent(part string) (churnEvent, error) {
	e := churnEvent{part: part}
	offset, action, ok := strings.Cut(part, ":")
	if !ok {
		return e, fmt.Errorf("want OFFSET:EVENT, e.g. 6s:join, 14s:leave=2, 10s:kill=2, 22s:restart=2, 5s:stop=2/10s")
	}
	var err error
	if e.at, err = time.ParseDuration(offset); err != nil || e.at < 0 {
		return e, fmt.Errorf("offset %q: want a duration from the run's start, like 6s or 1.5s", offset)
	}
	kind, arg, hasArg := strings.Cut(action, "=")
	e.kind = kind
	switch kind {
	case churnJoin:
		if hasArg {
			return e, fmt.Errorf("join takes no node number (the new node gets the next one)")
		}
		return e, nil
	case churnLeave, churnKill, churnRestart:
	case churnStop:
		node, pause, ok := strings.Cut(arg, "/")
		if !ok {
			return e, fmt.Errorf("stop=I/D: want a node and a pause, e.g. stop=2/10s")
		}
		if e.pause, err = time.ParseDuration(pause); err != nil || e.pause <= 0 {
			return e, fmt.Errorf("stop pause %q: want a positive duration like 10s", pause)
		}
		arg = node
	default:
		return e, fmt.Errorf("unknown event %q (want join, leave=I, kill=I, restart=I or stop=I/D)", kind)
	}
	if !hasArg {
		return e, fmt.Errorf("%s needs a node number, e.g. %s=2", kind, kind)
	}
	if e.node, err = strconv.Atoi(arg); err != nil || e.node < 1 {
		return e, fmt.Errorf("node %q: want a node number from 1 (nodes are numbered in start order)", arg)
	}
	return e, nil
}

// Node states while a schedule is checked.
const (
	nodeUp = iota
	nodeDown
	nodeStopped
)

// planChurn checks that events (in time order) can happen to a cluster of
// nodes nodes within duration: node 1 (the entry node with --entry-one,
// and the seed every join and restart joins) is never churned, each event
// finds its node in the state it needs (leave, kill and stop a running
// node, restart one that left or was killed, nothing while stopped), and
// every event, and the end of every stop, falls within the run. It gives
// each join its node number.
func planChurn(events []churnEvent, nodes int, duration time.Duration) error {
	state := make([]int, nodes+1) // by node number; [0] unused
	until := make([]time.Duration, nodes+1)
	for i := range events {
		e := &events[i]
		bad := func(format string, a ...any) error {
			return fmt.Errorf("--churn %q: %s", e.part, fmt.Sprintf(format, a...))
		}
		if e.at >= duration {
			return bad("at %v, not within the run's --duration %v", e.at, duration)
		}
		for n := range state {
			if state[n] == nodeStopped && until[n] < e.at {
				state[n] = nodeUp
			}
		}
		if e.kind == churnJoin {
			if len(state) > maxLocalNodes {
				return bad("more than %d nodes", maxLocalNodes)
			}
			e.node = len(state)
			state, until = append(state, nodeUp), append(until, 0)
			continue
		}
		switch {
		case e.node == 1:
			return bad("node 1 is the entry node (--entry-one) and the seed that joins and restarts join; churn nodes 2 and up")
		case e.node >= len(state):
			return bad("node %d does not exist at %v (%d nodes by then; a join adds the next number)", e.node, e.at, len(state)-1)
		case state[e.node] == nodeStopped:
			return bad("node %d is stopped until %v", e.node, until[e.node])
		case e.kind == churnRestart && state[e.node] == nodeUp:
			return bad("node %d is running at %v; restart a node that left or was killed", e.node, e.at)
		case e.kind != churnRestart && state[e.node] == nodeDown:
			return bad("node %d is not running at %v (it left or was killed; restart it first)", e.node, e.at)
		}
		switch e.kind {
		case churnLeave, churnKill:
			state[e.node] = nodeDown
		case churnRestart:
			state[e.node] = nodeUp
		case churnStop:
			if end := e.at + e.pause; end > duration {
				return bad("the stop ends at %v, after the run's --duration %v", end, duration)
			}
			state[e.node], until[e.node] = nodeStopped, e.at+e.pause
		}
	}
	return nil
}
