package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/shardlimiter/shardlimiter/limit"
)

// algAccuracy is the verdict on one algorithm: the hits admitted against
// the exact bound (over-admission) and against an exact replay of the
// same attempts (under-admission), summed over the keys.
type algAccuracy struct {
	Algorithm     string `json:"algorithm"`
	BoundFormula  string `json:"bound_formula"`
	ExpectedModel string `json:"expected_model"`
	Keys          int    `json:"keys"`

	AttemptedHits int64 `json:"attempted_hits"`
	AdmittedHits  int64 `json:"admitted_hits"`
	RejectedHits  int64 `json:"rejected_hits"`
	FailedChecks  int64 `json:"failed_checks"`

	BoundHits        int64   `json:"bound_hits"`
	OverAdmittedHits int64   `json:"over_admitted_hits"`
	OverAdmittedPct  float64 `json:"over_admitted_pct"` // of the bound
	ExpectedHits     int64   `json:"expected_hits"`
	UnderAdmitted    int64   `json:"under_admitted_hits"`
	UnderAdmittedPct float64 `json:"under_admitted_pct"` // of expected

	// MaxInPeriod is the most hits one key got admitted within any span
	// shorter than the period, by send times.
	MaxInPeriod int64 `json:"max_hits_in_any_period"`
	// SpanViolations (SLIDING_LOG) counts admissions that certainly put
	// more than limit hits in a span shorter than the period.
	SpanViolations *int64 `json:"span_violations,omitempty"`
	// ErrorVsExactLogPct (SLIDING_WINDOW) is (admitted − exact log) /
	// exact log, signed: how far the estimate strays from the exact log.
	ErrorVsExactLogPct *float64 `json:"error_vs_exact_log_pct,omitempty"`
}

// accuracyShards is how many recorders the per-key senders share.
const accuracyShards = 16

// runAccuracy runs each algorithm in turn on fresh keys and judges it.
func runAccuracy(ctx context.Context, cfg *config, ts []*target, metrics []string, stderr io.Writer) (*result, error) {
	id := runID(cfg.seed)
	before := sample(ctx, metrics)
	start := time.Now()
	col := newCollector(min(cfg.keys, accuracyShards), start)
	stop := col.progress(progressWriter(cfg, stderr))
	var accs []*algAccuracy
	for _, a := range cfg.algorithms {
		rule := cfg.ruleFor(a)
		logs := pace(ctx, cfg, ts, rule, keyNames(fmt.Sprintf("lt-%s-%s-", id, a), cfg.keys), col.shards)
		if ctx.Err() != nil {
			break
		}
		accs = append(accs, judge(rule, logs))
	}
	stop()
	col.finish()
	res := newResult(cfg, cfg.ruleFor(cfg.algorithms[0]), ts, col, before.until(sample(ctx, metrics)))
	res.Loop, res.Batch, res.Concurrency, res.Dist = "paced", 1, cfg.keys, "each key paced"
	if len(cfg.algorithms) > 1 {
		res.Algorithm = "all"
	}
	res.setAccuracy(accs)
	res.Interrupted = ctx.Err() != nil
	return res, nil
}

// paced is an open-loop schedule whose latency counts from the send: the
// pacing only fixes when checks leave, the judge uses the actual times.
type paced struct{ *openLoop }

func (paced) open() bool { return false }

// pace sends single checks for each key at accuracyRate, one at a time per
// key, check i of key k to target (k+i) mod n, and returns each key's
// attempts in send order.
func pace(ctx context.Context, cfg *config, ts []*target, rule limit.Rule, keys []string, shards []*shard) [][]attempt {
	perKey := cfg.accuracyRate() / float64(len(keys))
	start := time.Now().Add(10 * time.Millisecond)
	end := start.Add(cfg.duration)
	rctx, cancel := context.WithDeadline(ctx, end.Add(cfg.rpcTimeout+time.Second))
	defer cancel()
	logs := make([][]attempt, len(keys))
	var wg sync.WaitGroup
	for k, key := range keys {
		// Key k's checks are offset by k/len(keys) of the interval, so
		// that the keys' checks interleave evenly.
		phase := time.Duration(float64(k) / float64(len(keys)) * 1e9 / perKey)
		sched := paced{newOpenLoop(start.Add(phase), end, perKey)}
		check := []limit.Check{{Name: ruleName, Key: key, Hits: cfg.hits, Rule: rule}}
		i := k
		do := func(ctx context.Context) outcome {
			t := ts[i%len(ts)]
			i++
			send := time.Now()
			cctx, cancel := context.WithTimeout(ctx, cfg.rpcTimeout)
			res, err := t.conns[k%len(t.conns)].GetRateLimits(cctx, check)
			cancel()
			o := judgeCall(res, err)
			logs[k] = append(logs[k], attempt{
				send: send.UnixNano(), recv: time.Now().UnixNano(), hits: cfg.hits,
				admitted: o.admitted > 0, failed: o.rpcErr != "" || len(o.itemErrs) > 0,
			})
			return o
		}
		wg.Go(func() { drive(rctx, sched, do, shards[k%len(shards)]) })
	}
	wg.Wait()
	return logs
}

// judge sums each key's admissions against its bound and its exact replay.
func judge(r limit.Rule, logs [][]attempt) *algAccuracy {
	acc := &algAccuracy{
		Algorithm: r.Algorithm.String(), BoundFormula: boundFormula(r.Algorithm),
		ExpectedModel: "exact " + r.Algorithm.String() + " replayed at the send times", Keys: len(logs),
	}
	if r.Algorithm == limit.SlidingWindow {
		acc.ExpectedModel = "exact SLIDING_LOG replayed at the send times"
	}
	var violations int64
	for _, at := range logs {
		if len(at) > 0 {
			violations += acc.addKey(r, at)
		}
	}
	acc.OverAdmittedPct = pct(acc.OverAdmittedHits, acc.BoundHits)
	acc.UnderAdmittedPct = pct(acc.UnderAdmitted, acc.ExpectedHits)
	switch r.Algorithm {
	case limit.SlidingLog:
		acc.SpanViolations = &violations
	case limit.SlidingWindow:
		acc.ErrorVsExactLogPct = ptr(pct(acc.AdmittedHits-acc.ExpectedHits, acc.ExpectedHits))
	}
	return acc
}

// addKey adds one key's attempts (at least one) and returns its span
// violations.
func (acc *algAccuracy) addKey(r limit.Rule, at []attempt) int64 {
	var admitted int64
	for _, x := range at {
		acc.AttemptedHits += x.hits
		switch {
		case x.failed:
			acc.FailedChecks++
		case x.admitted:
			admitted += x.hits
		default:
			acc.RejectedHits += x.hits
		}
	}
	b, e := bound(r, at[0].send, at[len(at)-1].recv), expected(r, at)
	acc.AdmittedHits += admitted
	acc.BoundHits += b
	acc.ExpectedHits += e
	acc.OverAdmittedHits += max(admitted-b, 0)
	acc.UnderAdmitted += max(e-admitted, 0)
	acc.MaxInPeriod = max(acc.MaxInPeriod, maxInPeriod(int64(r.Period), at))
	return spanViolations(r, at)
}

func pct(n, of int64) float64 {
	if of == 0 {
		return 0
	}
	return 100 * float64(n) / float64(of)
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
		if a.FailedChecks > 0 {
			extra += fmt.Sprintf(" failed %d", a.FailedChecks)
		}
		p("  %-15s %9d %9d %9d %7.2f %9d %7.2f %10d  %s", a.Algorithm, a.AttemptedHits, a.AdmittedHits,
			a.BoundHits, a.OverAdmittedPct, a.ExpectedHits, a.UnderAdmittedPct, a.MaxInPeriod, extra)
	}
	p("  total over %.2f%%, under %.2f%%", *r.OverAdmittedPct, *r.UnderAdmittedPct)
	p("  expected = an exact limiter replayed at the send times (SLIDING_WINDOW: the exact sliding log); the server decides")
	p("  up to one round trip later, so under%% includes that jitter. max/period = most hits admitted to one key within")
	p("  one period, by send times: it can exceed an exact limit by that jitter; span violations count only certain ones.")
	for _, a := range r.Accuracy {
		p("  bound %-15s %s; span = first send → last answer", a.Algorithm, a.BoundFormula)
	}
}
