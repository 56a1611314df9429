package server

import (
	"context"
	"fmt"

	"github.com/shardlimiter/shardlimiter/limit"
	"github.com/shardlimiter/shardlimiter/transport"
	"github.com/shardlimiter/shardlimiter/transport/wire"
)

// Batches decides decoded batches through a transport.Checker and builds their
// answers: the part the checks services and the HTTP API share. It is safe
// for concurrent use.
type Batches struct {
	checker  transport.Checker
	maxBatch int
	metrics  *Metrics
	inflight *InFlight // nil: no bound
	listener int       // listener* index, for the shed metric
}

// Batches returns the batch handler of c on l: l's bound, metrics and
// batch limit; refusals count as listener's (listenerGRPC, …).
func (l *Listener) Batches(c transport.Checker, listener int) *Batches {
	return &Batches{checker: c, maxBatch: l.cfg.MaxBatch, metrics: l.cfg.Metrics, inflight: l.cfg.InFlight, listener: listener}
}

// MaxBatch returns the bound on items per call.
func (h *Batches) MaxBatch() int { return h.maxBatch }

// errShed refuses a call that does not fit under the in-flight bound.
var errShed = fmt.Errorf("transport: too many checks in flight on this node, retry after %v: %w", transport.ShedRetryDelay, transport.ErrOverloaded)

// decideBatch is decideAdmitted for a request the codec decoded, which has
// taken its units of the in-flight bound already (see checkBatch.decode).
func (h *Batches) decideBatch(ctx context.Context, in *checkBatch, compact bool) (*ResultBatch, error) {
	if in.err == errShed {
		h.metrics.shed(h.listener, shedChecks)
	}
	if in.err != nil {
		return nil, in.err
	}
	out := in.out
	if out == nil {
		out = getAnswer() // back to the pool once the codec has encoded it
	}
	res, err := h.decide(ctx, in.checks, compact, out)
	if err != nil && out != in.out {
		putAnswer(out)
	}
	return res, err
}

// Decide answers the items of in, in order, for a call that holds
// its units of the in-flight bound already: the transport.Checker decides those that
// converted; those that did not never reach it and are answered with their
// error in place. A non-nil error fails the whole call; transport.Code maps it to a
// status.
//
// With compact set (the Peers service), the owner of the first decided item
// is named once for the batch instead of in each item it decided.
func (h *Batches) Decide(ctx context.Context, in *wire.Checks, compact bool) (*ResultBatch, error) {
	return h.decide(ctx, in, compact, nil)
}

// decide is Decide into out's memory (its Limits, and its Results when an
// item failed), or into a new ResultBatch when out is nil. A stream reuses
// its out from batch to batch: its answer is encoded before the next
// batch is read.
func (h *Batches) decide(ctx context.Context, in *wire.Checks, compact bool, out *ResultBatch) (*ResultBatch, error) {
	n := in.Len()
	if n > h.maxBatch {
		return nil, &transport.BatchError{N: n, Max: h.maxBatch}
	}
	if h.checker == nil {
		return nil, fmt.Errorf("transport: no checker configured: %w", transport.ErrUnavailable)
	}
	if out == nil {
		out = new(ResultBatch)
	}
	results, err := h.check(ctx, in.Checks, out)
	if err != nil {
		return nil, err
	}
	out.Limits, out.Owner = resized(out.Limits, n), ""
	if compact && len(results) > 0 {
		out.Owner = results[0].Owner
	}
	if len(in.Failed) > 0 {
		out.failed = resized(out.failed, n)
		out.Results = out.failed
	} else {
		out.Results = results
	}
	h.merge(in, results, out)
	return out, nil
}

// check has the transport.Checker decide checks: into out's memory when
// it is a transport.CheckerInto, else into memory of its own.
func (h *Batches) check(ctx context.Context, checks []limit.Check, out *ResultBatch) ([]limit.Result, error) {
	if len(checks) == 0 {
		return nil, nil
	}
	if c, ok := h.checker.(transport.CheckerInto); ok {
		results := out.decidedMemory(len(checks))
		return results, c.CheckInto(ctx, checks, results)
	}
	results, err := h.checker.Check(ctx, checks)
	if err == nil && len(results) != len(checks) {
		err = fmt.Errorf("transport: checker answered %d of %d checks", len(results), len(checks))
	}
	return results, err
}

// merge fills out in batch order: the transport.Checker's results, with the failed
// items' errors at their positions, and every item's limit. It counts each
// item in the metrics.
func (h *Batches) merge(in *wire.Checks, results []limit.Result, out *ResultBatch) {
	var t Tally
	failed, next := in.Failed, 0
	for i := range out.Results {
		if len(failed) > 0 && failed[0].Index == i {
			out.Results[i] = limit.Failed(limit.Invalid, failed[0].Err)
			out.Limits[i] = failed[0].Limit
			t.Item(failed[0].Algorithm, 1, &out.Results[i]) // an error whatever its hits
			failed = failed[1:]
			continue
		}
		c := &in.Checks[next]
		out.Results[i] = results[next] // in place when no item failed
		out.Limits[i] = c.Rule.Limit
		t.Item(c.Rule.Algorithm, c.Hits, &out.Results[i])
		next++
	}
	h.metrics.Add(&t)
}

// resized returns b with length n, reusing its array when it is large
// enough (its contents are overwritten by the caller).
func resized[T any](b []T, n int) []T {
	if cap(b) < n {
		return make([]T, n)
	}
	return b[:n]
}
