package main

import (
	"context"
	"fmt"
	"io"
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

	ScheduledChecks int64 `json:"scheduled_checks"` // due by the pacing within --duration
	AttemptedHits   int64 `json:"attempted_hits"`
	AdmittedHits    int64 `json:"admitted_hits"`
	RejectedHits    int64 `json:"rejected_hits"`
	// FailedChecks = ItemErrors + RPCErrors: checks neither admitted nor
	// rejected. DeadlineExceeded counts the RPC errors that were calls
	// past --rpc-timeout.
	FailedChecks     int64 `json:"failed_checks"`
	ItemErrors       int64 `json:"item_errors"`
	RPCErrors        int64 `json:"rpc_errors"`
	DeadlineExceeded int64 `json:"deadline_exceeded"`

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

	// WorstKey is the key admitted the most hits above its own bound (or,
	// when none was over, the least below).
	WorstKey *keyVerdict `json:"worst_key,omitempty"`
	// PerKey is every key's verdict, in key order, when the run has at
	// most perKeyMax keys.
	PerKey []keyDetail `json:"per_key,omitempty"`
	// Churn is what --churn did to the cluster during this run.
	Churn *churnReport `json:"churn,omitempty"`
}

// keyVerdict is one key's admissions against its bound.
type keyVerdict struct {
	Key      string  `json:"key"`
	Admitted int64   `json:"admitted_hits"`
	Bound    int64   `json:"bound_hits"`
	OverPct  float64 `json:"over_pct"` // (admitted − bound) / bound; negative when under
}

// keyDetail is one key's verdict in full: its admissions against its
// bound (over-admission) and against its exact replay (under-admission).
type keyDetail struct {
	Key           string `json:"key"`
	Admitted      int64  `json:"admitted_hits"`
	Bound         int64  `json:"bound_hits"`
	Expected      int64  `json:"expected_hits"`
	OverAdmitted  int64  `json:"over_admitted_hits"`
	UnderAdmitted int64  `json:"under_admitted_hits"`
	Failed        int64  `json:"failed_checks"`
}

// perKeyMax is the most keys whose verdicts a report lists one by one.
const perKeyMax = 16

// accuracyShards is how many recorders the per-key senders share.
const accuracyShards = 16

// pacingLead is how far ahead of now a run's pacing starts, so that every
// key's sender is waiting when the first checks fall due.
const pacingLead = 10 * time.Millisecond

// runAccuracy runs each algorithm in turn on fresh keys and judges it.
func runAccuracy(ctx context.Context, cfg *config, ts []*target, metrics []string, stderr io.Writer) (*result, error) {
	id := runID(cfg.seed)
	before := sample(ctx, metrics)
	col := newCollector(min(cfg.keys, accuracyShards), time.Now())
	stop := col.progress(progressWriter(cfg, stderr))
	var accs []*algAccuracy
	for _, a := range cfg.algorithms {
		acc := accuracyOf(ctx, cfg, ts, a, id, col.shards, nil)
		if acc == nil {
			break
		}
		accs = append(accs, acc)
	}
	stop()
	col.finish()
	return accuracyResult(ctx, cfg, targetAddrs(ts), col, before.until(sample(ctx, metrics)), accs), nil
}

// accuracyResult builds the report of an accuracy run.
func accuracyResult(ctx context.Context, cfg *config, targets []string, col *collector, cpu cpuDelta, accs []*algAccuracy) *result {
	res := newResult(cfg, cfg.ruleFor(cfg.algorithms[0]), targets, col, cpu)
	res.Loop, res.Batch, res.Concurrency, res.Dist = "paced", 1, cfg.keys, "each key paced"
	if len(cfg.algorithms) > 1 {
		res.Algorithm = algorithmList(cfg.algorithms)
	}
	res.setAccuracy(accs)
	res.setPacing(cfg.accuracyRate(), accs, col)
	res.Interrupted = ctx.Err() != nil
	return res
}

// accuracyOf paces algorithm a's keys for --duration from a start just
// ahead, runs during (when not nil) alongside with that start, and judges
// the answers once both are done; nil when ctx ended first.
func accuracyOf(ctx context.Context, cfg *config, ts []*target, a limit.Algorithm, id string, shards []*shard, during func(start time.Time)) *algAccuracy {
	rule := cfg.ruleFor(a)
	keys := keyNames(fmt.Sprintf("lt-%s-%s-", id, a), cfg.keys)
	start := time.Now().Add(pacingLead)
	var wg sync.WaitGroup
	if during != nil {
		wg.Go(func() { during(start) })
	}
	logs, scheduled := pace(ctx, cfg, ts, rule, keys, start, shards)
	wg.Wait()
	if ctx.Err() != nil {
		return nil
	}
	acc := judge(rule, keys, logs)
	acc.ScheduledChecks = scheduled
	return acc
}

// runChurnAccuracy runs each algorithm on a --local cluster of its own,
// started fresh, while the --churn schedule is applied to it, and judges
// it. A fresh cluster per algorithm gives every run the same starting
// shape (node numbers, addresses, no node joined or state handed off by
// the previous run) at the cost of a cluster start per algorithm, which
// the collector's clock includes. A judged cluster is killed, not stopped
// gracefully: its state is discarded either way.
func runChurnAccuracy(ctx context.Context, cfg *config, bin string, stderr io.Writer) (*result, error) {
	log := progressWriter(cfg, stderr)
	id := runID(cfg.seed)
	before := sample(ctx, nil)
	col := newCollector(min(cfg.keys, accuracyShards), time.Now())
	stop := col.progress(log)
	var accs []*algAccuracy
	var targets []string
	var err error
	for _, a := range cfg.algorithms {
		var acc *algAccuracy
		var addrs []string
		acc, addrs, err = churnAlgorithm(ctx, cfg, bin, a, id, col.shards, log)
		if acc == nil || err != nil {
			break
		}
		accs = append(accs, acc)
		if targets == nil {
			targets = addrs
		}
	}
	stop()
	col.finish()
	if err != nil && ctx.Err() == nil {
		return nil, err
	}
	res := accuracyResult(ctx, cfg, targets, col, before.until(sample(ctx, nil)), accs)
	res.Churn, res.Nodes = cfg.churnSpec, cfg.local
	res.note("churn: each algorithm runs on a fresh cluster and replays the schedule; event times are offsets from the start of its run")
	if !cfg.entryOne {
		res.note("churn without --entry-one: checks sent to a churned node while it is down fail and count as failed checks")
	}
	for _, a := range accs {
		if a.Churn.failed() {
			res.ChurnFailed = true
			res.note(a.Algorithm + ": a churn event or the convergence after them failed (see churn); the run did not do what --churn asked")
		}
	}
	return res, nil
}

// churnAlgorithm starts a cluster, measures algorithm a on it while the
// churn schedule runs, and stops it. It returns the verdict (nil when ctx
// ended first) and the addresses the checks went to.
func churnAlgorithm(ctx context.Context, cfg *config, bin string, a limit.Algorithm, id string, shards []*shard, log io.Writer) (*algAccuracy, []string, error) {
	fmt.Fprintf(log, "loadtest: %v: starting a fresh %d-node cluster\n", a, cfg.local)
	cl, err := startLocal(ctx, cfg.local, bin, cfg.localFlags, log)
	if err != nil {
		return nil, nil, fmt.Errorf("local cluster: %w", err)
	}
	defer cl.discard()
	addrs := cl.grpcAddrs()
	if cfg.entryOne {
		addrs = addrs[:1]
	}
	ts, err := dialTargets(addrs, cfg.conns)
	if err != nil {
		return nil, nil, err
	}
	defer closeTargets(ts)
	if err := probe(ctx, ts, cfg.batch); err != nil {
		return nil, nil, err
	}
	var rep *churnReport
	acc := accuracyOf(ctx, cfg, ts, a, id, shards, func(start time.Time) {
		rep = runChurn(ctx, cl, cfg.churn, start, log)
	})
	if acc != nil {
		acc.Churn = rep
	}
	return acc, addrs, nil
}

// judge sums each key's admissions against its bound and its exact replay.
func judge(r limit.Rule, keys []string, logs [][]attempt) *algAccuracy {
	acc := &algAccuracy{
		Algorithm: r.Algorithm.String(), BoundFormula: boundFormula(r.Algorithm),
		ExpectedModel: "exact " + r.Algorithm.String() + " replayed at the send times", Keys: len(logs),
	}
	if r.Algorithm == limit.SlidingWindow {
		acc.ExpectedModel = "exact SLIDING_LOG replayed at the send times"
	}
	var violations int64
	for k, at := range logs {
		if len(at) > 0 {
			violations += acc.addKey(r, keys[k], at, len(logs) <= perKeyMax)
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

// addKey adds one key's attempts (at least one), and its verdict to
// PerKey when detail is set, and returns its span violations.
func (acc *algAccuracy) addKey(r limit.Rule, key string, at []attempt, detail bool) int64 {
	var admitted, failed int64
	for _, x := range at {
		acc.AttemptedHits += x.hits
		switch x.fail {
		case failItem:
			acc.ItemErrors++
		case failDeadline:
			acc.DeadlineExceeded++
			acc.RPCErrors++
		case failRPC:
			acc.RPCErrors++
		}
		switch {
		case x.failed():
			acc.FailedChecks++
			failed++
		case x.admitted:
			admitted += x.hits
		default:
			acc.RejectedHits += x.hits
		}
	}
	b, e := bound(r, at[0].send, at[len(at)-1].recv), expected(r, at)
	if w := acc.WorstKey; w == nil || admitted-b > w.Admitted-w.Bound {
		acc.WorstKey = &keyVerdict{Key: key, Admitted: admitted, Bound: b, OverPct: pct(admitted-b, b)}
	}
	acc.AdmittedHits += admitted
	acc.BoundHits += b
	acc.ExpectedHits += e
	acc.OverAdmittedHits += max(admitted-b, 0)
	acc.UnderAdmitted += max(e-admitted, 0)
	if detail {
		acc.PerKey = append(acc.PerKey, keyDetail{Key: key, Admitted: admitted, Bound: b, Expected: e,
			OverAdmitted: max(admitted-b, 0), UnderAdmitted: max(e-admitted, 0), Failed: failed})
	}
	acc.MaxInPeriod = max(acc.MaxInPeriod, maxInPeriod(int64(r.Period), at))
	return spanViolations(r, at)
}

func pct(n, of int64) float64 {
	if of == 0 {
		return 0
	}
	return 100 * float64(n) / float64(of)
}
