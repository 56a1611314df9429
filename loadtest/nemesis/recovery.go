package nemesis

import (
	"fmt"
	"math"
	"slices"
)

// RecoveryTarget is how soon, in seconds after a fault's end, answers are
// to be exact again: 3 s, and 5 s after a healed cut (one ring again, then
// the take-back of what each side decided) or a restart of every node.
func RecoveryTarget(kind string) float64 {
	switch kind {
	case Partition, OneWay, AllStop:
		return 5
	}
	return 3
}

// KindRecovery sums up the recoveries of one fault kind. Only a fault
// alone counts: no other fault in effect from its start until its answers
// were exact again (or the end of the run), so the figure is its own.
type KindRecovery struct {
	Faults     int       `json:"faults"`
	Alone      int       `json:"alone"`
	Recovered  []float64 `json:"recovered_s"` // of the faults alone, sorted
	Never      int       `json:"never"`       // alone, and not exact again before the run ended
	TargetS    float64   `json:"target_s"`
	OverTarget int       `json:"over_target"`
}

// alone reports whether no other fault was in effect, or still being
// recovered from, between f's start and its recovery (or, unrecovered,
// the end of the run).
func alone(f *Fault, all []Fault) bool {
	for i := range all {
		if g := &all[i]; g != f && g.StartS < settled(f) && settled(g) > f.StartS {
			return false
		}
	}
	return true
}

// settled is when f's answers were exact again; never, when they were not.
func settled(f *Fault) float64 {
	if f.RecoveryS == nil {
		return math.Inf(1)
	}
	return f.EndS + *f.RecoveryS
}

// SumRecoveries fills RecoveryByKind from the faults' recoveries.
func (r *Report) SumRecoveries() {
	r.RecoveryByKind = map[string]*KindRecovery{}
	for i := range r.Faults {
		f := &r.Faults[i]
		k := r.RecoveryByKind[f.Kind]
		if k == nil {
			k = &KindRecovery{TargetS: RecoveryTarget(f.Kind)}
			r.RecoveryByKind[f.Kind] = k
		}
		k.Faults++
		if f.Error != "" || !alone(f, r.Faults) {
			continue
		}
		k.Alone++
		if f.RecoveryS == nil {
			k.Never++
			continue
		}
		k.Recovered = append(k.Recovered, *f.RecoveryS)
		if *f.RecoveryS > k.TargetS {
			k.OverTarget++
		}
	}
	for _, k := range r.RecoveryByKind {
		slices.Sort(k.Recovered)
	}
}

// recoveryViolations lists, for a spaced run (FaultGapS > 0), the kinds
// whose faults alone were not exact again within their target.
func (r *Report) recoveryViolations() []string {
	if r.FaultGapS <= 0 {
		return nil
	}
	var out []string
	for _, kind := range Kinds {
		k := r.RecoveryByKind[kind]
		if k == nil {
			continue
		}
		if k.OverTarget > 0 {
			out = append(out, fmt.Sprintf("%d of %d %s faults recovered later than %.0f s (slowest %.2f s)", k.OverTarget, k.Alone, kind, k.TargetS, k.Recovered[len(k.Recovered)-1]))
		}
		if k.Never > 0 {
			out = append(out, fmt.Sprintf("%d %s faults never recovered before the end", k.Never, kind))
		}
	}
	return out
}

// recoveryLines is the text report's recovery summary, one line per kind.
func (r *Report) recoveryLines() []string {
	var out []string
	for _, kind := range Kinds {
		k := r.RecoveryByKind[kind]
		if k == nil {
			continue
		}
		s := fmt.Sprintf("%-9s %d faults, %d alone", kind, k.Faults, k.Alone)
		if n := len(k.Recovered); n > 0 {
			s += fmt.Sprintf(": exact again after median %.2f s, max %.2f s (target %.0f s, %d over)", k.Recovered[n/2], k.Recovered[n-1], k.TargetS, k.OverTarget)
		}
		if k.Never > 0 {
			s += fmt.Sprintf(", %d never", k.Never)
		}
		out = append(out, s)
	}
	if len(out) > 0 && r.FaultGapS <= 0 {
		out = append(out, "(overlapping faults: few are alone; --fault-gap spaces them so that each is)")
	}
	return out
}
