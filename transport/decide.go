package transport

import (
	"context"
	"fmt"

	"github.com/shardlimiter/shardlimiter/limit"
	"github.com/shardlimiter/shardlimiter/transport/internal/wire"
)

// batchHandler decides a decoded batch through a Checker and builds its
// answer. It is the part the gRPC services and the HTTP handler share.
type batchHandler struct {
	checker  Checker
	maxBatch int
	metrics  *Metrics
	inflight *InFlight // nil: no bound
	listener int       // listener* index, for the shed metric
}

func newBatchHandler(c Checker, maxBatch int, m *Metrics, b *InFlight, listener int) *batchHandler {
	if maxBatch <= 0 {
		maxBatch = DefaultMaxBatch
	}
	return &batchHandler{checker: c, maxBatch: maxBatch, metrics: m, inflight: b, listener: listener}
}

// errShed refuses a call that does not fit under the in-flight bound.
var errShed = fmt.Errorf("transport: too many checks in flight on this node, retry after %v: %w", ShedRetryDelay, ErrOverloaded)

// decideBatch is decide for a request the codec decoded, which has taken
// its units of the in-flight bound already (see checkBatch.decode).
func (h *batchHandler) decideBatch(ctx context.Context, in *checkBatch, compact bool) (*resultBatch, error) {
	if in.err == errShed {
		h.metrics.shed(h.listener, shedChecks)
	}
	if in.err != nil {
		return nil, in.err
	}
	return h.decideAdmitted(ctx, in.checks, compact)
}

// decide answers the items of in, in order: the Checker decides those that
// converted; those that did not never reach it and are answered with their
// error in place. A non-nil error fails the whole call; Code maps it to a
// status.
//
// With compact set (the Peers service), the owner of the first decided item
// is named once for the batch instead of in each item it decided.
func (h *batchHandler) decide(ctx context.Context, in *wire.Checks, compact bool) (*resultBatch, error) {
	n := in.Len()
	if n > h.maxBatch {
		return nil, &batchError{n: n, max: h.maxBatch}
	}
	// Weighted by items, so that a batch of 1000 costs what 1000 single
	// checks do.
	units, err := h.inflight.acquireChecks(n, h.metrics, h.listener)
	if err != nil {
		return nil, err
	}
	defer h.inflight.Release(units)
	return h.decideAdmitted(ctx, in, compact)
}

// decideAdmitted is decide once the call holds its units of the bound.
func (h *batchHandler) decideAdmitted(ctx context.Context, in *wire.Checks, compact bool) (*resultBatch, error) {
	n := in.Len()
	if n > h.maxBatch {
		return nil, &batchError{n: n, max: h.maxBatch}
	}
	if h.checker == nil {
		return nil, fmt.Errorf("transport: no checker configured: %w", ErrUnavailable)
	}
	var results []limit.Result
	if len(in.Checks) > 0 {
		var err error
		results, err = h.checker.Check(ctx, in.Checks)
		if err != nil {
			return nil, err
		}
		if len(results) != len(in.Checks) {
			return nil, fmt.Errorf("transport: checker answered %d of %d checks", len(results), len(in.Checks))
		}
	}
	out := &resultBatch{results: results, limits: make([]int64, n)}
	if compact && len(results) > 0 {
		out.owner = results[0].Owner
	}
	if len(in.Failed) > 0 {
		out.results = make([]limit.Result, n)
	}
	h.merge(in, results, out)
	return out, nil
}

// merge fills out in batch order: the Checker's results, with the failed
// items' errors at their positions, and every item's limit. It counts each
// item in the metrics.
func (h *batchHandler) merge(in *wire.Checks, results []limit.Result, out *resultBatch) {
	var t tally
	failed, next := in.Failed, 0
	for i := range out.results {
		if len(failed) > 0 && failed[0].Index == i {
			out.results[i] = limit.Failed(limit.Invalid, failed[0].Err)
			out.limits[i] = failed[0].Limit
			t.item(failed[0].Algorithm, 1, &out.results[i]) // an error whatever its hits
			failed = failed[1:]
			continue
		}
		c := &in.Checks[next]
		out.results[i] = results[next] // in place when no item failed
		out.limits[i] = c.Rule.Limit
		t.item(c.Rule.Algorithm, c.Hits, &out.results[i])
		next++
	}
	h.metrics.add(&t)
}
