package transport

import (
	"context"
	"fmt"
	"sync"

	"github.com/shardlimiter/shardlimiter/limit"
	"github.com/shardlimiter/shardlimiter/transport/pb"
)

// DefaultMaxBatch is the default bound on items per call (DESIGN §3).
const DefaultMaxBatch = 1000

// batchHandler turns a batch of wire requests into a batch of wire responses
// through a Checker. It is the part the gRPC and HTTP servers share.
type batchHandler struct {
	checker  Checker
	maxBatch int
	metrics  *Metrics
}

// scratch is the per-call working memory of decide, pooled: the checks
// handed to the Checker and the items that failed conversion.
type scratch struct {
	checks []limit.Check
	failed []failedItem
}

// failedItem is a request that did not convert, by position in the batch.
type failedItem struct {
	index int
	alg   limit.Algorithm // numAlgorithmLabels-1 when unknown
	limit int64           // the request's limit, echoed in the answer
	err   error
}

var scratchPool = sync.Pool{New: func() any { return new(scratch) }}

func getScratch() *scratch { return scratchPool.Get().(*scratch) }

// release returns sc to the pool; sc must not be used afterwards.
func (sc *scratch) release() {
	clear(sc.checks) // drop the strings for the collector
	sc.checks, sc.failed = sc.checks[:0], sc.failed[:0]
	if cap(sc.checks) <= 4*DefaultMaxBatch {
		scratchPool.Put(sc)
	}
}

// add converts the request at index i into sc: a check, or a failed item.
func (sc *scratch) add(i int, r *pb.RateLimitRequest) {
	c, err := checkFromProto(r)
	if err != nil {
		sc.failed = append(sc.failed, failedItem{index: i, alg: algorithmOf(r), limit: r.GetLimit(), err: err})
		return
	}
	sc.checks = append(sc.checks, c)
}

// decide answers reqs in order. Items that fail conversion never reach the
// Checker; they are answered with their error and merged back in place. A
// non-nil error fails the whole call; Code maps it to a status.
//
// With compact set (the Peers service), the owner of the first decided item
// is returned instead of being repeated in every item's metadata.
func (h *batchHandler) decide(ctx context.Context, reqs []*pb.RateLimitRequest, compact bool) ([]*pb.RateLimitResponse, string, error) {
	if len(reqs) > h.maxBatch {
		return nil, "", &batchError{n: len(reqs), max: h.maxBatch}
	}
	if h.checker == nil {
		return nil, "", fmt.Errorf("transport: no checker configured: %w", ErrUnavailable)
	}
	sc := getScratch()
	defer sc.release()
	for i, r := range reqs {
		sc.add(i, r)
	}
	return h.decideConverted(ctx, sc, len(reqs), compact)
}

// decideBatch is decide for a request the server codec has decoded.
func (h *batchHandler) decideBatch(ctx context.Context, in *checkBatch, compact bool) ([]*pb.RateLimitResponse, string, error) {
	if in.err != nil {
		return nil, "", in.err
	}
	if in.n > h.maxBatch {
		return nil, "", &batchError{n: in.n, max: h.maxBatch}
	}
	return h.decideConverted(ctx, in.sc, in.n, compact)
}

// decideConverted is decide after conversion: sc holds the n items of the
// batch, as checks and failed items.
func (h *batchHandler) decideConverted(ctx context.Context, sc *scratch, n int, compact bool) ([]*pb.RateLimitResponse, string, error) {
	if h.checker == nil {
		return nil, "", fmt.Errorf("transport: no checker configured: %w", ErrUnavailable)
	}
	var results []limit.Result
	if len(sc.checks) > 0 {
		var err error
		results, err = h.checker.Check(ctx, sc.checks)
		if err != nil {
			return nil, "", err
		}
		if len(results) != len(sc.checks) {
			return nil, "", fmt.Errorf("transport: checker answered %d of %d checks", len(results), len(sc.checks))
		}
	}
	var meta metaCache
	if compact && len(results) > 0 {
		meta.omitOwner = results[0].Owner
	}
	return h.respond(n, sc, results, &meta), meta.omitOwner, nil
}

// respond builds the responses: the Checker's results in order, with the
// failed items' errors merged in at their positions. The messages share one
// backing array: one allocation per batch, not per item.
func (h *batchHandler) respond(n int, sc *scratch, results []limit.Result, meta *metaCache) []*pb.RateLimitResponse {
	out := make([]*pb.RateLimitResponse, n)
	msgs := make([]pb.RateLimitResponse, n)
	var t tally
	next := 0 // next result to place
	failed := sc.failed
	for i := range n {
		dst := &msgs[i]
		out[i] = dst
		if len(failed) > 0 && failed[0].index == i {
			r := limit.Failed(limit.Invalid, failed[0].err)
			resultToProto(&r, failed[0].limit, dst, meta)
			t.item(failed[0].alg, &r)
			failed = failed[1:]
			continue
		}
		c, r := &sc.checks[next], &results[next]
		next++
		resultToProto(r, c.Rule.Limit, dst, meta)
		t.item(c.Rule.Algorithm, r)
	}
	h.metrics.add(&t)
	return out
}

// algorithmOf labels a request's algorithm for metrics.
func algorithmOf(r *pb.RateLimitRequest) limit.Algorithm {
	a := r.GetAlgorithm()
	if a < 0 || int(a) >= algorithmUnknown {
		return limit.Algorithm(algorithmUnknown)
	}
	return limit.Algorithm(a)
}

func (h *batchHandler) setDefaults() {
	if h.maxBatch <= 0 {
		h.maxBatch = DefaultMaxBatch
	}
}
