package server

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/shardlimiter/shardlimiter/limit"
	"github.com/shardlimiter/shardlimiter/transport"
	"github.com/shardlimiter/shardlimiter/transport/pb"
)

// intoChecker is a transport.CheckerInto that decides a check whose key
// starts with "w" (Remaining = its hits, owner "node-a") and writes
// nothing for the others, as a checker may leave an item it has nothing to
// say about: such an item must reach the client as the zero result, never
// as what an earlier answer held in the same memory.
type intoChecker struct{}

func (intoChecker) Check(ctx context.Context, checks []limit.Check) ([]limit.Result, error) {
	res := make([]limit.Result, len(checks))
	return res, intoChecker{}.CheckInto(ctx, checks, res)
}

func (intoChecker) CheckInto(_ context.Context, checks []limit.Check, res []limit.Result) error {
	for i, c := range checks {
		if strings.HasPrefix(c.Key, "w") {
			res[i] = limit.Result{Decision: limit.Decision{Allowed: true, Remaining: c.Hits, ResetAt: 5e6}, Owner: "node-a"}
		}
	}
	return nil
}

var _ transport.CheckerInto = intoChecker{}

func intoRequest(prefix string, n, hits int) *pb.GetRateLimitsRequest {
	req := &pb.GetRateLimitsRequest{}
	for i := range n {
		r := wireReq(prefix+strconv.Itoa(i), int64(hits+i), nil)
		r.Limit = 1 << 40
		req.Requests = append(req.Requests, r)
	}
	return req
}

// The answers of unary calls are pooled: a batch whose items the checker
// leaves alone, after batches it decided in full, is answered with zero
// results (the memory is cleared before reuse).
func TestAnswerMemoryLeaksNoEarlierResult(t *testing.T) {
	t.Parallel()
	_, target, dialer := startGRPC(t, testConfig{Checker: intoChecker{}})
	rpc := pb.NewRateLimiterClient(dialConn(t, target, dialer))
	for round := range 40 {
		if _, err := rpc.GetRateLimits(ctxTimeout(t), intoRequest("w", 100, 3)); err != nil {
			t.Fatalf("round %d: decided batch: %v", round, err)
		}
		resp, err := rpc.GetRateLimits(ctxTimeout(t), intoRequest("s", 100, 3))
		if err != nil {
			t.Fatalf("round %d: undecided batch: %v", round, err)
		}
		if n := len(resp.GetResponses()); n != 100 {
			t.Fatalf("round %d: %d items answered, want 100", round, n)
		}
		for i, r := range resp.GetResponses() {
			if r.GetRemaining() != 0 || r.GetResetTimeMs() != 0 || len(r.GetMetadata()) != 0 || r.GetStatus() != pb.Status_OVER_LIMIT {
				t.Fatalf("round %d: item %d left alone by the checker answered %v, want the zero result", round, i, r)
			}
		}
	}
}

// Concurrent unary calls each get their own answer: none is given back to
// the pool (and overwritten by another call) before it is encoded.
func TestAnswerMemoryConcurrentCalls(t *testing.T) {
	t.Parallel()
	_, target, dialer := startGRPC(t, testConfig{Checker: intoChecker{}})
	rpc := pb.NewRateLimiterClient(dialConn(t, target, dialer))
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := range 8 {
		wg.Go(func() {
			for call := range 30 {
				hits := 1000*g + call
				resp, err := rpc.GetRateLimits(ctxTimeout(t), intoRequest("w", 64, hits))
				if err != nil {
					errs <- err
					return
				}
				if n := len(resp.GetResponses()); n != 64 {
					errs <- fmt.Errorf("caller %d call %d: %d items answered, want 64", g, call, n)
					return
				}
				for i, r := range resp.GetResponses() {
					if r.GetRemaining() != int64(hits+i) {
						errs <- fmt.Errorf("caller %d call %d: item %d has remaining %d, want %d", g, call, i, r.GetRemaining(), hits+i)
						return
					}
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}
