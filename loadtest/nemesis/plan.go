// Package nemesis is the fault schedule and the checker of loadtest
// --mode nemesis (docs/RELIABILITY.md): Plan draws overlapping faults from
// a seed, Recorder keeps every check of a mixed load, Scraper samples the
// nodes' fallback counters and peak RSS, and Judge reads the whole history
// afterwards into a Report: each key's spans admitted over the bound of a
// single perfect limiter, matched with the faults in effect and the
// counted fallbacks. Driving the cluster is the tool's (package main).
package nemesis

import (
	"fmt"
	"math/rand/v2"
	"time"
)

// fault kinds of --mode nemesis.
const (
	Kill      = "kill"      // SIGKILL, restart after a pause
	Term      = "term"      // SIGTERM (graceful leave), restart after a pause
	Stop      = "stop"      // SIGSTOP, SIGCONT after 0.5–5 s
	Partition = "partition" // two groups of nodes cut from each other (root)
	OneWay    = "oneway"    // one group's packets to the other dropped (root)
	Netem     = "netem"     // delay, jitter and loss on one node's link (root)
	DiskFull  = "diskfull"  // the tmpfs under one node's state dir filled (root)
	Corrupt   = "corrupt"   // SIGKILL, the node's snapshot file damaged, restart
	AllStop   = "allstop"   // SIGTERM to every node at once, restart all
)

// Kinds lists every kind, in the report's order.
var Kinds = []string{Kill, Term, Stop, Partition, OneWay, Netem, DiskFull, Corrupt, AllStop}

// NeedsRoot reports kinds that need network namespaces or a tmpfs mount.
func NeedsRoot(kind string) bool {
	switch kind {
	case Partition, OneWay, Netem, DiskFull:
		return true
	}
	return false
}

// ProcessFault reports kinds that stop or restart a node's process: at
// most one at a time per node, and none during an allstop.
func ProcessFault(kind string) bool {
	switch kind {
	case Kill, Term, Stop, Corrupt, AllStop:
		return true
	}
	return false
}

// Fault is one planned fault and, once run, what happened. Times are
// seconds from the start of the load.
type Fault struct {
	Kind                string  `json:"kind"`
	Nodes               []int   `json:"nodes"`            // 1-based; the kill's node, the partition's first group
	Others              []int   `json:"others,omitempty"` // partition, oneway: the second group (oneway drops Nodes → Others)
	Netem               string  `json:"netem,omitempty"`  // what the slow link did
	Delay, Jitter, Loss int     `json:"-"`                // netem: ms, ms, %
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

// SettleTail is the time after the last fault's planned end during which
// no fault starts, so the run ends on a cluster that could recover.
const SettleTail = 8 * time.Second

// Plan draws a schedule of overlapping faults from seed for a run of
// duration over nodes nodes: the kinds in shuffled rounds (every kind
// once before any twice), a start every 1.5–4.5 s from 3 s, each lasting
// its kind's span. Process faults of one node never overlap, and an
// allstop overlaps no process fault; network faults overlap anything but
// another of their own (one cut and one netem at a time). Kinds not in
// kinds are left out. The plan ends SettleTail before duration.
//
// A gap above zero spaces the faults instead: none overlaps another, and
// each starts gap after the one before ended (after RestartAllowance
// too, for a process fault), so that each fault's recovery is measured
// alone (Judge's recovery needs 3 s of exact answers after it).
func Plan(seed uint64, nodes int, duration time.Duration, kinds []string, gap time.Duration) []Fault {
	rng := rand.New(rand.NewPCG(seed, 0x6e656d65736973))
	p := planner{rng: rng, nodes: nodes, busy: make([]float64, nodes+1), gap: gap.Seconds()}
	limit := (duration - SettleTail).Seconds()
	t := 3.0
	for len(kinds) > 0 {
		round := append([]string(nil), kinds...)
		rng.Shuffle(len(round), func(i, j int) { round[i], round[j] = round[j], round[i] })
		for _, kind := range round {
			f := p.draw(kind, t)
			if f.AtS+f.ForS+RestartAllowance > limit {
				return p.plan
			}
			p.add(f)
			t += 1.5 + 3*rng.Float64()
			if gap > 0 {
				t = max(t, p.quiet)
			}
		}
	}
	return nil
}

// RestartAllowance is the time a restarted node is counted busy after its
// planned restart: its start, join and handoffs.
const RestartAllowance = 3.0

// planner tracks what is busy while a plan is drawn.
type planner struct {
	rng     *rand.Rand
	nodes   int
	busy    []float64 // per node (1-based): process faults until
	netBusy float64   // partition or oneway until
	emBusy  float64   // netem until
	disk    []float64 // diskfull per node until
	gap     float64   // spaced plan: seconds of quiet after each fault
	quiet   float64   // spaced plan: the next fault starts at this or later
	plan    []Fault
}

// draw makes a fault of kind starting at t or later, when its nodes are
// free.
func (p *planner) draw(kind string, t float64) Fault {
	f := Fault{Kind: kind, AtS: t}
	span := func(lo, hi float64) float64 { return lo + (hi-lo)*p.rng.Float64() }
	switch kind {
	case Kill, Term:
		f.ForS = span(0.5, 4)
	case Corrupt:
		f.ForS = span(0.5, 2)
	case Stop:
		f.ForS = span(0.5, 5)
	case AllStop:
		f.ForS = span(1, 2)
	case Partition, OneWay:
		f.ForS = span(3, 8)
		f.Nodes, f.Others = p.split()
		f.AtS = max(t, p.netBusy)
		return f
	case Netem:
		f.ForS = span(3, 8)
		f.Nodes = []int{1 + p.rng.IntN(p.nodes)}
		f.Delay, f.Jitter, f.Loss = 50+p.rng.IntN(250), 10+p.rng.IntN(90), p.rng.IntN(20)
		f.Netem = fmt.Sprintf("delay %dms %dms loss %d%%", f.Delay, f.Jitter, f.Loss)
		f.AtS = max(t, p.emBusy)
		return f
	case DiskFull:
		f.ForS = span(4, 10)
		f.Nodes = []int{1 + p.rng.IntN(p.nodes)}
		if p.disk == nil {
			p.disk = make([]float64, p.nodes+1)
		}
		f.AtS = max(t, p.disk[f.Nodes[0]])
		return f
	}
	if kind == AllStop {
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
func (p *planner) add(f Fault) {
	end := f.AtS + f.ForS
	if p.gap > 0 {
		p.quiet = end + p.gap
		if ProcessFault(f.Kind) {
			p.quiet += RestartAllowance
		}
	}
	switch {
	case f.Kind == AllStop:
		for n := range p.busy {
			p.busy[n] = end + RestartAllowance
		}
	case ProcessFault(f.Kind):
		p.busy[f.Nodes[0]] = end + RestartAllowance
	case f.Kind == Partition, f.Kind == OneWay:
		p.netBusy = end + 1
	case f.Kind == Netem:
		p.emBusy = end + 1
	case f.Kind == DiskFull:
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
