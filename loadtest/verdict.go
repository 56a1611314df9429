package main

import (
	"fmt"
	"strings"

	"github.com/shardlimiter/shardlimiter/limit"
)

// pacingStats says whether an accuracy run kept its pace. The judge uses
// the actual send and answer times, so a run that fell behind is still
// judged correctly, on fewer attempts than asked for.
type pacingStats struct {
	TargetChecksPerSecond float64 `json:"target_checks_per_second"`
	Scheduled             int64   `json:"scheduled_checks"` // due within --duration, all algorithms
	Sent                  int64   `json:"sent_checks"`
	Late                  int64   `json:"late_sends"`   // sent > 1 ms after due: the previous answer was slow, or the tool woke late
	LateWakeups           int64   `json:"late_wakeups"` // of which the tool woke > 1 ms late: this machine's CPU
	MaxLagMS              float64 `json:"max_lag_ms"`
	FellBehind            bool    `json:"fell_behind"`
}

// setAccuracy attaches the verdicts and their totals over all algorithms.
func (r *result) setAccuracy(accs []*algAccuracy) {
	var over, bound, under, exp int64
	for _, a := range accs {
		over, bound = over+a.OverAdmittedHits, bound+a.BoundHits
		under, exp = under+a.UnderAdmitted, exp+a.ExpectedHits
	}
	r.Accuracy = accs
	r.OverAdmittedPct = ptr(pct(over, bound))
	r.UnderAdmittedPct = ptr(pct(under, exp))
	r.note("accuracy: the owner's clock decides and the judge uses this machine's: exact when they share a clock (--local), else off by their skew")
}

// setPacing records how well the checks kept their schedule.
func (r *result) setPacing(rate float64, accs []*algAccuracy, col *collector) {
	t := &col.tally
	ps := &pacingStats{TargetChecksPerSecond: rate, Sent: t.rpcs + t.abandoned, Late: t.late, LateWakeups: t.lateWakeups, MaxLagMS: float64(t.maxLag) / 1e6}
	for _, a := range accs {
		ps.Scheduled += a.ScheduledChecks
	}
	significant := func(n int64) bool { return float64(n) > 0.01*float64(ps.Scheduled) }
	ps.FellBehind = significant(ps.Scheduled-ps.Sent) || significant(ps.Late)
	r.Pacing = ps
	if significant(ps.LateWakeups) {
		r.note(fmt.Sprintf("pacing: %d of %d checks left more than 1 ms after their due time because the tool woke late (max lag %.1f ms): this machine's CPU is busy; the judge uses the actual send times, so the verdict holds for the checks sent",
			ps.LateWakeups, ps.Sent, ps.MaxLagMS))
	}
}

// algorithmList writes algorithms as a comma list.
func algorithmList(as []limit.Algorithm) string {
	names := make([]string, len(as))
	for i, a := range as {
		names[i] = a.String()
	}
	return strings.Join(names, ",")
}

func summarizeAccuracy(b *strings.Builder, r *result) {
	p := func(format string, a ...any) { fmt.Fprintf(b, format+"\n", a...) }
	p("accuracy    %d keys paced, limit %d per %dms, hits %d; over = admitted above the bound, under = below an exact replay",
		r.Keys, r.Limit, r.PeriodMS, r.Hits)
	p("  %-15s %9s %9s %9s %7s %9s %7s %10s  %s", "algorithm", "attempted", "admitted", "bound", "over%", "expected", "under%", "max/period", "")
	for _, a := range r.Accuracy {
		extra := ""
		if a.SpanViolations != nil {
			extra = fmt.Sprintf("span violations %d", *a.SpanViolations)
		}
		if a.ErrorVsExactLogPct != nil {
			extra = fmt.Sprintf("vs exact log %+.2f%%", *a.ErrorVsExactLogPct)
		}
		p("  %-15s %9d %9d %9d %7.2f %9d %7.2f %10d  %s", a.Algorithm, a.AttemptedHits, a.AdmittedHits,
			a.BoundHits, a.OverAdmittedPct, a.ExpectedHits, a.UnderAdmittedPct, a.MaxInPeriod, extra)
	}
	p("  total over %.2f%%, under %.2f%%", *r.OverAdmittedPct, *r.UnderAdmittedPct)
	for _, a := range r.Accuracy {
		p("  %-15s failed checks %d (item errors %d, rpc errors %d, of which past the deadline %d)%s",
			a.Algorithm, a.FailedChecks, a.ItemErrors, a.RPCErrors, a.DeadlineExceeded, fmtWorstKey(a.WorstKey))
	}
	p("  expected = an exact limiter replayed at the send times (SLIDING_WINDOW: the exact sliding log); the server decides")
	p("  up to one round trip later, so under%% includes that jitter. max/period = most hits admitted to one key within")
	p("  one period, by send times: it can exceed an exact limit by that jitter; span violations count only certain ones.")
	for _, a := range r.Accuracy {
		p("  bound %-15s %s; span = first send → last answer", a.Algorithm, a.BoundFormula)
	}
	if ps := r.Pacing; ps != nil {
		p("pacing      %.0f checks/s offered: %d due, %d sent, %d left >1ms late (%d woke late), max lag %.1fms",
			ps.TargetChecksPerSecond, ps.Scheduled, ps.Sent, ps.Late, ps.LateWakeups, ps.MaxLagMS)
	}
	if r.Churn != "" {
		summarizeChurn(p, r)
	}
}

func fmtWorstKey(w *keyVerdict) string {
	if w == nil {
		return ""
	}
	return fmt.Sprintf("; worst key %s admitted %d of its bound %d (%+.2f%%)", w.Key, w.Admitted, w.Bound, w.OverPct)
}

// summarizeChurn lists each algorithm's churn events as they happened.
func summarizeChurn(p func(string, ...any), r *result) {
	p("churn       %s, on a fresh %d-node cluster per algorithm; times from the start of each algorithm's run", r.Churn, r.Nodes)
	for _, a := range r.Accuracy {
		if a.Churn == nil {
			continue
		}
		name := a.Algorithm
		for _, e := range a.Churn.Events {
			p("  %-15s %7.3fs %-7s node %d (%s)", name, e.AtS, e.Event, e.Node, e.describe())
			name = ""
		}
		switch c := a.Churn; {
		case c.ConvergedS != nil:
			p("  %-15s %7.3fs converged: every running node lists exactly the running nodes", name, *c.ConvergedS)
		case c.ConvergeError != "":
			p("  %-15s NOT CONVERGED: %s", name, c.ConvergeError)
		}
	}
}
