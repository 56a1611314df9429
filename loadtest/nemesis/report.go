package nemesis

import (
	"fmt"
	"io"
	"slices"
	"strings"
)

// Report is the result of --mode nemesis (text summary or --json).
type Report struct {
	Mode       string   `json:"mode"`
	Seed       uint64   `json:"seed"` // replay with --seed
	Nodes      int      `json:"nodes"`
	DurationS  float64  `json:"duration_s"`
	Namespaces bool     `json:"namespaces"` // nodes in network namespaces (root)
	Skipped    []string `json:"skipped,omitempty"`
	Rules      []string `json:"rules"`
	Workers    int      `json:"workers"`

	FaultsByKind   map[string]int           `json:"faults_by_kind"`
	Faults         []Fault                  `json:"faults"`
	FaultGapS      float64                  `json:"fault_gap_s,omitempty"` // spaced faults (--fault-gap): recovery targets are judged
	RecoveryByKind map[string]*KindRecovery `json:"recovery_by_kind"`

	Calls               int64    `json:"calls"`
	AnsweredCalls       int64    `json:"answered_calls"`
	MaxAnswerMS         float64  `json:"max_answer_ms"` // the slowest answered call
	UnansweredCalls     int64    `json:"unanswered_calls"`
	UnansweredCounted   int64    `json:"unanswered_counted"`   // sent to a node down, stopped or restarting
	UnansweredUncounted int64    `json:"unanswered_uncounted"` // sent to a node running normally
	UncountedCalls      []string `json:"uncounted_calls,omitempty"`
	Checks              int64    `json:"checks"`
	AdmittedHits        int64    `json:"admitted_hits"`
	RejectedHits        int64    `json:"rejected_hits"`
	ItemErrors          int64    `json:"item_errors"`
	RecordFull          bool     `json:"record_full,omitempty"`
	RecordFullS         float64  `json:"record_full_s,omitempty"` // when, from the start

	BoundHits         int64            `json:"bound_hits"`
	OverAdmittedHits  int64            `json:"over_admitted_hits"`
	OverAdmittedPct   float64          `json:"over_admitted_pct"`
	OverByAlgorithm   map[string]int64 `json:"over_by_algorithm"`
	OverByFault       map[string]int64 `json:"over_by_fault_in_effect"`
	OverOutsideFaults int64            `json:"over_outside_faults"`
	OverCounted       int64            `json:"over_in_counted_fallbacks"`
	OverUncounted     int64            `json:"over_outside_counted_fallbacks"`
	UncountedWindows  []string         `json:"uncounted_windows,omitempty"`
	UncountedKeys     []string         `json:"uncounted_keys,omitempty"`
	WorstKey          *Key             `json:"worst_key,omitempty"`
	ExpectedHits      int64            `json:"expected_hits"`
	UnderAdmittedHits int64            `json:"under_admitted_hits"`
	UnderAdmittedPct  float64          `json:"under_admitted_pct"`

	CounterRises map[string]float64 `json:"counter_rises"`
	Panics       []string           `json:"panics"`
	MemoryBudget int64              `json:"memory_budget_bytes"`
	PeakRSS      []int64            `json:"peak_rss_bytes"` // per node, VmHWM
	RSSWithin    bool               `json:"rss_within_budget"`

	Violations []string `json:"violations"`
	Notes      []string `json:"notes,omitempty"`
}

// Verdict lists what broke a guarantee: a panic, an unanswered call to a
// running node, over-admission outside the counted fallbacks, peak RSS
// over the budget, or a fault that could not be applied; and a run that
// did not test what it claims: a load stopped early (the record full).
func (r *Report) Verdict() {
	r.Violations = nil
	bad := func(format string, a ...any) { r.Violations = append(r.Violations, fmt.Sprintf(format, a...)) }
	if len(r.Panics) > 0 {
		bad("%d panics in node stderr", len(r.Panics))
	}
	if r.UnansweredUncounted > 0 {
		bad("%d calls to running nodes unanswered", r.UnansweredUncounted)
	}
	if r.OverUncounted > 0 {
		bad("%d hits over the bound outside any counted fallback", r.OverUncounted)
	}
	if r.RecordFull {
		bad("the record of checks filled at %.0fs of %.0fs: the faults after it ran without load", r.RecordFullS, r.DurationS)
	}
	if !r.RSSWithin {
		bad("peak RSS over the %d-byte budget: %v", r.MemoryBudget, r.PeakRSS)
	}
	for _, f := range r.Faults {
		if f.Error != "" {
			bad("%s at %.1fs failed: %s", f.Kind, f.StartS, f.Error)
		}
	}
	r.Violations = append(r.Violations, r.recoveryViolations()...)
}

// WriteText writes the report as text.
func WriteText(w io.Writer, r *Report) error {
	var b strings.Builder
	p := func(format string, a ...any) { fmt.Fprintf(&b, format+"\n", a...) }
	p("nemesis: seed %d, %d nodes, %.0fs, %d workers, namespaces %v, faults %s", r.Seed, r.Nodes, r.DurationS, r.Workers, r.Namespaces, r.spacing())
	for _, s := range r.Skipped {
		p("  skipped: %s", s)
	}
	p("rules: %s", strings.Join(r.Rules, "; "))
	r.writeFaults(p)
	p("calls: %d, answered %d (the slowest in %.0f ms), unanswered %d (%d to a node down/stopped/restarting, %d to a running node)",
		r.Calls, r.AnsweredCalls, r.MaxAnswerMS, r.UnansweredCalls, r.UnansweredCounted, r.UnansweredUncounted)
	for _, s := range r.UncountedCalls {
		p("  unanswered: %s", s)
	}
	p("checks: %d, admitted %d hits, rejected %d, item errors %d", r.Checks, r.AdmittedHits, r.RejectedHits, r.ItemErrors)
	p("over-admission: %d hits (%.3f%% of the bound %d); by algorithm %v", r.OverAdmittedHits, r.OverAdmittedPct, r.BoundHits, r.OverByAlgorithm)
	p("  by fault in effect %v; outside any fault %d", r.OverByFault, r.OverOutsideFaults)
	p("  in counted fallbacks %d; outside counted fallbacks %d", r.OverCounted, r.OverUncounted)
	for _, s := range r.UncountedWindows {
		p("  uncounted: %s", s)
	}
	for _, s := range r.UncountedKeys {
		p("    %s", s)
	}
	if r.WorstKey != nil {
		p("  worst key %s (%s): %d admitted, %d over", r.WorstKey.Key, r.WorstKey.Algorithm, r.WorstKey.Admitted, r.WorstKey.Over)
	}
	p("under-admission: %d hits (%.2f%% of an exact replay's %d)", r.UnderAdmittedHits, r.UnderAdmittedPct, r.ExpectedHits)
	p("node counters (rises): %s", fmtCounters(r.CounterRises))
	p("panics: %d", len(r.Panics))
	for _, s := range r.Panics {
		p("  %s", s)
	}
	p("peak RSS per node (VmHWM): %s of a %s budget", fmtBytesList(r.PeakRSS), fmtMiB(r.MemoryBudget))
	for _, n := range r.Notes {
		p("note: %s", n)
	}
	if len(r.Violations) == 0 {
		p("verdict: OK")
	} else {
		p("verdict: %d VIOLATIONS: %s", len(r.Violations), strings.Join(r.Violations, "; "))
	}
	gap := ""
	if r.FaultGapS > 0 {
		gap = fmt.Sprintf(" --fault-gap %gs", r.FaultGapS)
	}
	p("replay: --mode nemesis --local %d --duration %.0fs --seed %d%s", r.Nodes, r.DurationS, r.Seed, gap)
	_, err := io.WriteString(w, b.String())
	return err
}

// Describe says what a fault did to whom.
func (f *Fault) Describe() string {
	s := fmt.Sprintf("nodes %v", f.Nodes)
	switch f.Kind {
	case AllStop:
		s = "every node"
	case Partition:
		s = fmt.Sprintf("%v | %v", f.Nodes, f.Others)
	case OneWay:
		s = fmt.Sprintf("%v → %v dropped", f.Nodes, f.Others)
	case Netem:
		s += " " + f.Netem
	}
	if f.Error != "" {
		s += " FAILED: " + f.Error
	}
	return s
}

func (f *Fault) recoveryText() string {
	if f.RecoveryS == nil {
		return "; " + f.Recovery
	}
	return fmt.Sprintf("; recovered +%.2fs (%s)", *f.RecoveryS, f.Recovery)
}

func fmtCounters(m map[string]float64) string {
	var parts []string
	for _, name := range append(slices.Clone(Counters), loggedName) {
		parts = append(parts, fmt.Sprintf("%s %.0f", strings.TrimPrefix(name, "shardlimiter_"), m[name]))
	}
	return strings.Join(parts, ", ")
}

func fmtMiB(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }

func fmtBytesList(ns []int64) string {
	parts := make([]string, len(ns))
	for i, n := range ns {
		parts[i] = fmtMiB(n)
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

// CountFaults fills FaultsByKind.
func (r *Report) CountFaults() {
	r.FaultsByKind = map[string]int{}
	for _, f := range r.Faults {
		r.FaultsByKind[f.Kind]++
	}
	slices.SortStableFunc(r.Faults, func(a, b Fault) int {
		switch {
		case a.StartS < b.StartS:
			return -1
		case a.StartS > b.StartS:
			return 1
		}
		return 0
	})
}

// spacing says how the faults were scheduled.
func (r *Report) spacing() string {
	if r.FaultGapS > 0 {
		return fmt.Sprintf("one at a time, %gs apart", r.FaultGapS)
	}
	return "overlapping"
}

// writeFaults writes the faults, each with its recovery, and the recovery
// by kind.
func (r *Report) writeFaults(p func(format string, a ...any)) {
	var kinds []string
	for _, k := range Kinds {
		if n := r.FaultsByKind[k]; n > 0 {
			kinds = append(kinds, fmt.Sprintf("%s %d", k, n))
		}
	}
	p("faults: %d (%s)", len(r.Faults), strings.Join(kinds, ", "))
	for _, f := range r.Faults {
		p("  %6.1fs–%6.1fs %-9s %s%s", f.StartS, f.EndS, f.Kind, f.Describe(), f.recoveryText())
	}
	if lines := r.recoveryLines(); len(lines) > 0 {
		p("recovery by kind (until 3 s of exact answers in a row):")
		for _, l := range lines {
			p("  %s", l)
		}
	}
}
