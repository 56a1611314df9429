package main

import (
	"fmt"
	"math/rand/v2"
	"time"
)

// Fault kinds of --mode nemesis.
const (
	faultKill      = "kill"      // SIGKILL, restart after a pause
	faultTerm      = "term"      // SIGTERM (graceful leave), restart after a pause
	faultStop      = "stop"      // SIGSTOP, SIGCONT after 0.5–5 s
	faultPartition = "partition" // two groups of nodes cut from each other (root)
	faultOneWay    = "oneway"    // one group's packets to the other dropped (root)
	faultNetem     = "netem"     // delay, jitter and loss on one node's link (root)
	faultDiskFull  = "diskfull"  // the tmpfs under one node's state dir filled (root)
	faultCorrupt   = "corrupt"   // SIGKILL, the node's snapshot file damaged, restart
	faultAllStop   = "allstop"   // SIGTERM to every node at once, restart all
)

// faultKinds lists every kind, in the report's order.
var faultKinds = []string{faultKill, faultTerm, faultStop, faultPartition, faultOneWay, faultNetem, faultDiskFull, faultCorrupt, faultAllStop}

// needsRoot reports kinds that need network namespaces or a tmpfs mount.
func needsRoot(kind string) bool {
	switch kind {
	case faultPartition, faultOneWay, faultNetem, faultDiskFull:
		return true
	}
	return false
}

// processFault reports kinds that stop or restart a node's process: at
// most one at a time per node, and none during an allstop.
func processFault(kind string) bool {
	switch kind {
	case faultKill, faultTerm, faultStop, faultCorrupt, faultAllStop:
		return true
	}
	return false
}

// fault is one planned fault and, once run, what happened. Times are
// seconds from the start of the load.
type fault struct {
	Kind                string  `json:"kind"`
	Nodes               []int   `json:"nodes"`            // 1-based; the kill's node, the partition's first group
	Others              []int   `json:"others,omitempty"` // partition, oneway: the second group (oneway drops Nodes → Others)
	Netem               string  `json:"netem,omitempty"`  // what the slow link did
	delay, jitter, loss int     // netem: ms, ms, %
	AtS                 float64 `json:"planned_at_s"`
	ForS                float64 `json:"planned_for_s"` // down, stopped, cut or full this long

	StartS float64 `json:"start_s"`
	// EndS is when the fault was over: the node ready again, the cut
	// healed, SIGCONT sent, the disk freed.
	EndS      float64  `json:"end_s"`
	Error     string   `json:"error,omitempty"`
	RecoveryS *float64 `json:"recovery_s"` // until answers were exact again; nil: not before the next fault or the end
	Recovery  string   `json:"recovery"`   // how RecoveryS was found
}

// settleTail is the time after the last fault's planned end during which
// no fault starts, so the run ends on a cluster that could recover.
const settleTail = 8 * time.Second

// planFaults draws a schedule of overlapping faults from seed for a run of
// duration over nodes nodes: the kinds in shuffled rounds (every kind
// once before any twice), a start every 1.5–4.5 s from 3 s, each lasting
// its kind's span. Process faults of one node never overlap, and an
// allstop overlaps no process fault; network faults overlap anything but
// another of their own (one cut and one netem at a time). Kinds not in
// kinds are left out. The plan ends settleTail before duration.
func planFaults(seed uint64, nodes int, duration time.Duration, kinds []string) []fault {
	rng := rand.New(rand.NewPCG(seed, 0x6e656d65736973))
	p := planner{rng: rng, nodes: nodes, busy: make([]float64, nodes+1)}
	limit := (duration - settleTail).Seconds()
	t := 3.0
	for len(kinds) > 0 {
		round := append([]string(nil), kinds...)
		rng.Shuffle(len(round), func(i, j int) { round[i], round[j] = round[j], round[i] })
		for _, kind := range round {
			f := p.draw(kind, t)
			if f.AtS+f.ForS+restartAllowance > limit {
				return p.plan
			}
			p.add(f)
			t += 1.5 + 3*rng.Float64()
		}
	}
	return nil
}

// restartAllowance is the time a restarted node is counted busy after its
// planned restart: its start, join and handoffs.
const restartAllowance = 3.0

// planner tracks what is busy while a plan is drawn.
type planner struct {
	rng     *rand.Rand
	nodes   int
	busy    []float64 // per node (1-based): process faults until
	netBusy float64   // partition or oneway until
	emBusy  float64   // netem until
	disk    []float64 // diskfull per node until
	plan    []fault
}

// draw makes a fault of kind starting at t or later, when its nodes are
// free.
func (p *planner) draw(kind string, t float64) fault {
	f := fault{Kind: kind, AtS: t}
	span := func(lo, hi float64) float64 { return lo + (hi-lo)*p.rng.Float64() }
	switch kind {
	case faultKill, faultTerm:
		f.ForS = span(0.5, 4)
	case faultCorrupt:
		f.ForS = span(0.5, 2)
	case faultStop:
		f.ForS = span(0.5, 5)
	case faultAllStop:
		f.ForS = span(1, 2)
	case faultPartition, faultOneWay:
		f.ForS = span(3, 8)
		f.Nodes, f.Others = p.split()
		f.AtS = max(t, p.netBusy)
		return f
	case faultNetem:
		f.ForS = span(3, 8)
		f.Nodes = []int{1 + p.rng.IntN(p.nodes)}
		f.delay, f.jitter, f.loss = 50+p.rng.IntN(250), 10+p.rng.IntN(90), p.rng.IntN(20)
		f.Netem = fmt.Sprintf("delay %dms %dms loss %d%%", f.delay, f.jitter, f.loss)
		f.AtS = max(t, p.emBusy)
		return f
	case faultDiskFull:
		f.ForS = span(4, 10)
		f.Nodes = []int{1 + p.rng.IntN(p.nodes)}
		if p.disk == nil {
			p.disk = make([]float64, p.nodes+1)
		}
		f.AtS = max(t, p.disk[f.Nodes[0]])
		return f
	}
	if kind == faultAllStop {
		for n := 1; n <= p.nodes; n++ {
			f.AtS = max(f.AtS, p.busy[n])
		}
		return f
	}
	n := 1 + p.rng.IntN(p.nodes)
	f.Nodes = []int{n}
	f.AtS = max(t, p.busy[n])
	return f
}

// add books f's nodes until its end.
func (p *planner) add(f fault) {
	end := f.AtS + f.ForS
	switch {
	case f.Kind == faultAllStop:
		for n := range p.busy {
			p.busy[n] = end + restartAllowance
		}
	case processFault(f.Kind):
		p.busy[f.Nodes[0]] = end + restartAllowance
	case f.Kind == faultPartition, f.Kind == faultOneWay:
		p.netBusy = end + 1
	case f.Kind == faultNetem:
		p.emBusy = end + 1
	case f.Kind == faultDiskFull:
		p.disk[f.Nodes[0]] = end + 1
	}
	p.plan = append(p.plan, f)
}

// split divides the nodes into two non-empty groups at random.
func (p *planner) split() (a, b []int) {
	perm := p.rng.Perm(p.nodes)
	cut := 1 + p.rng.IntN(p.nodes-1)
	for i, n := range perm {
		if i < cut {
			a = append(a, n+1)
		} else {
			b = append(b, n+1)
		}
	}
	return a, b
}
