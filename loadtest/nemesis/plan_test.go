package nemesis

import (
	"bytes"
	"slices"
	"strings"
	"testing"
	"time"
)

// nemesisSeed is loadtest's TestNemesisMinute seed: its plan must hold
// every kind within 60 s.
const nemesisSeed = 42

// TestPlanFaults checks the schedule drawn from a seed: the same seed
// gives the same plan; the seed of TestNemesisMinute has every kind within
// 60 s; no two process faults of a node overlap and none overlaps an
// allstop; every fault ends SettleTail before the run does.
func TestPlanFaults(t *testing.T) {
	const d = 60 * time.Second
	plan := Plan(nemesisSeed, 3, d, Kinds, 0)
	if again := Plan(nemesisSeed, 3, d, Kinds, 0); !slices.EqualFunc(plan, again, func(a, b Fault) bool {
		return a.Kind == b.Kind && a.AtS == b.AtS && a.ForS == b.ForS && slices.Equal(a.Nodes, b.Nodes)
	}) {
		t.Fatalf("seed %d drew two plans:\n%+v\n%+v", nemesisSeed, plan, again)
	}
	for _, k := range Kinds {
		if !slices.ContainsFunc(plan, func(f Fault) bool { return f.Kind == k }) {
			t.Errorf("seed %d: no %s in 60 s: %+v", nemesisSeed, k, plan)
		}
	}
	for i, f := range plan {
		if end := f.AtS + f.ForS + RestartAllowance; end > (d - SettleTail).Seconds() {
			t.Errorf("%s at %.1fs ends at %.1fs, after %v", f.Kind, f.AtS, end, d-SettleTail)
		}
		for _, g := range plan[i+1:] {
			if !ProcessFault(f.Kind) || !ProcessFault(g.Kind) {
				continue
			}
			shared := f.Kind == AllStop || g.Kind == AllStop || f.Nodes[0] == g.Nodes[0]
			if shared && f.AtS < g.AtS+g.ForS+RestartAllowance && g.AtS < f.AtS+f.ForS+RestartAllowance {
				t.Errorf("%s of %v at %.1fs overlaps %s of %v at %.1fs", f.Kind, f.Nodes, f.AtS, g.Kind, g.Nodes, g.AtS)
			}
		}
	}
}

// TestParseCounters reads the fallback counters summed over their labels.
func TestParseCounters(t *testing.T) {
	text := `# HELP shardlimiter_peer_fallback_decisions_total x
shardlimiter_peer_fallback_decisions_total{policy="local"} 3
shardlimiter_peer_fallback_decisions_total{policy="open"} 2
shardlimiter_peer_standin_decisions_total 7
shardlimiter_peer_standin_decisions_total_extra 100
shardlimiter_handoff_incomplete_total 1
`
	vals, ok := ParseCounters(bytes.NewBufferString(text))
	if want := []float64{5, 7, 1, 0, 0, 0}; !ok || !slices.Equal(vals, want) {
		t.Errorf("ParseCounters = %v, %v; want %v, true", vals, ok, want)
	}
	if _, ok := ParseCounters(bytes.NewBufferString("not metrics\n")); ok {
		t.Error("ParseCounters of a page without shardlimiter series: ok, want not")
	}
}

// TestPlanSpaced: with a gap no fault overlaps another, each starts the gap
// after the one before ended (and its restart, for a process fault), and
// a 10-minute plan still draws every kind.
func TestPlanSpaced(t *testing.T) {
	const d, gap = 10 * time.Minute, 6 * time.Second
	plan := Plan(nemesisSeed, 3, d, Kinds, gap)
	for _, k := range Kinds {
		if !slices.ContainsFunc(plan, func(f Fault) bool { return f.Kind == k }) {
			t.Errorf("no %s in a spaced 10-minute plan", k)
		}
	}
	for i := 1; i < len(plan); i++ {
		prev, f := plan[i-1], plan[i]
		quiet := prev.AtS + prev.ForS + gap.Seconds()
		if ProcessFault(prev.Kind) {
			quiet += RestartAllowance
		}
		if f.AtS < quiet-1e-9 {
			t.Errorf("%s at %.2fs starts before %.2fs, the end of the quiet after %s at %.2fs (for %.2fs)", f.Kind, f.AtS, quiet, prev.Kind, prev.AtS, prev.ForS)
		}
	}
	if dense := Plan(nemesisSeed, 3, d, Kinds, 0); len(dense) <= len(plan) {
		t.Errorf("spaced plan has %d faults, the overlapping one %d: spacing should leave fewer", len(plan), len(dense))
	}
}

// TestRecoverySummary: only faults alone count towards a kind's recovery;
// in a spaced run a recovery over the kind's target, or none, is a
// violation, in an overlapping run it is only reported.
func TestRecoverySummary(t *testing.T) {
	sec := func(v float64) *float64 { return &v }
	r := &Report{RSSWithin: true, Faults: []Fault{
		{Kind: Kill, StartS: 3, EndS: 5, RecoveryS: sec(1.2)},
		{Kind: Kill, StartS: 20, EndS: 22, RecoveryS: sec(3.5)},
		{Kind: Partition, StartS: 40, EndS: 46, RecoveryS: sec(4.5)},
		{Kind: Stop, StartS: 60, EndS: 62, RecoveryS: sec(9)}, // a netem began before it recovered
		{Kind: Netem, StartS: 65, EndS: 70, RecoveryS: sec(0)},
		{Kind: Term, StartS: 90, EndS: 92}, // never exact again
	}}
	r.SumRecoveries()
	kill := r.RecoveryByKind[Kill]
	if kill.Faults != 2 || kill.Alone != 2 || !slices.Equal(kill.Recovered, []float64{1.2, 3.5}) || kill.OverTarget != 1 {
		t.Errorf("kill: %+v", kill)
	}
	if p := r.RecoveryByKind[Partition]; p.OverTarget != 0 || p.TargetS != 5 {
		t.Errorf("partition (4.5 s, target 5 s): %+v", p)
	}
	if s := r.RecoveryByKind[Stop]; s.Alone != 0 || len(s.Recovered) != 0 {
		t.Errorf("stop overlapped by a netem counted as alone: %+v", s)
	}
	if n := r.RecoveryByKind[Netem]; n.Alone != 0 {
		t.Errorf("netem that began inside the stop's recovery counted as alone: %+v", n)
	}
	if term := r.RecoveryByKind[Term]; term.Never != 1 {
		t.Errorf("term never recovered: %+v", term)
	}
	r.Verdict()
	if len(r.Violations) != 0 {
		t.Errorf("overlapping run: recovery judged: %v", r.Violations)
	}
	r.FaultGapS = 6
	r.Verdict()
	if len(r.Violations) != 2 || !strings.Contains(r.Violations[0], "kill") || !strings.Contains(r.Violations[1], "term") {
		t.Errorf("spaced run: violations %q, want the slow kill and the term never exact again", r.Violations)
	}
}

func TestVerdictRecordFull(t *testing.T) {
	r := &Report{RSSWithin: true, DurationS: 1800}
	r.Verdict()
	if len(r.Violations) != 0 {
		t.Fatalf("clean report: violations %q", r.Violations)
	}
	r.RecordFull, r.RecordFullS = true, 912
	r.Verdict()
	if len(r.Violations) != 1 || !strings.Contains(r.Violations[0], "filled at 912s of 1800s") {
		t.Errorf("record full at 912 s: violations %q, want one naming when it filled", r.Violations)
	}
}
