package nemesis

import (
	"bytes"
	"slices"
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
	plan := Plan(nemesisSeed, 3, d, Kinds)
	if again := Plan(nemesisSeed, 3, d, Kinds); !slices.EqualFunc(plan, again, func(a, b Fault) bool {
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
