package client

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/shardlimiter/shardlimiter/limit"
	"github.com/shardlimiter/shardlimiter/transport"
)

// maxAttempts bounds the nodes one check is sent to: its owner, then up to
// two others when a node cannot be reached.
const maxAttempts = 3

// CheckError is the failure of one check that a node answered
// (limit.Result.Error): bad input (Reason limit.Invalid) or an owner
// unreachable under a fail-closed policy (limit.Unavailable, which
// errors.Is reports as ErrUnavailable).
type CheckError struct {
	Reason limit.Reason
	Msg    string
}

func (e *CheckError) Error() string {
	return fmt.Sprintf("client: check failed (%s): %s", e.Reason, e.Msg)
}

func (e *CheckError) Unwrap() error {
	if e.Reason == limit.Unavailable {
		return ErrUnavailable
	}
	return nil
}

// Check asks whether c may spend its hits now. Over the limit is a result
// (Allowed false, RetryAfter), not an error. The error is non-nil when the
// check was not decided: a *CheckError for a check the node refused, or
// the failure of the call (errors.Is ErrUnavailable, ErrTimeout,
// ErrOverloaded, ErrClosed, or ctx's error). Concurrent calls are merged
// into shared RPCs (see the package doc).
func (c *Client) Check(ctx context.Context, chk limit.Check) (limit.Result, error) {
	if c.closed.Load() {
		return limit.Result{}, ErrClosed
	}
	if c.leases != nil && leasable(&chk) {
		var res limit.Result
		if c.leases.decide(&chk, &res) {
			return res, nil
		}
	}
	checks := []limit.Check{chk}
	c.inflight.Add(1)
	defer c.inflight.Add(-1)
	res, err := c.do(ctx, c.route(chk.Key), checks)
	if err != nil {
		return limit.Result{}, err
	}
	if res[0].Error != "" {
		return res[0], &CheckError{Reason: res[0].Reason, Msg: res[0].Error}
	}
	return res[0], nil
}

// CheckBatch asks for every check at once and returns one Result per check,
// in order; each check goes to its owner, all owners in parallel. A
// check's own failure is in its Result (Error, Reason). The error reports
// checks that could not be sent: their Results then carry Reason
// limit.Unavailable and the error's text, the others their answers. When
// ctx ends first CheckBatch returns nil and ctx's error. checks may be
// longer than MaxBatch; the client splits it.
func (c *Client) CheckBatch(ctx context.Context, checks []limit.Check) ([]limit.Result, error) {
	if c.closed.Load() {
		return nil, ErrClosed
	}
	if len(checks) == 0 {
		return nil, nil
	}
	if c.leases != nil {
		return c.checkBatchLeased(ctx, checks)
	}
	return c.checkBatch(ctx, checks)
}

// checkBatchLeased is CheckBatch with leases: the checks a lease decides
// are answered here, the others sent. A check that ends a chained group
// is the group's, never decided alone.
func (c *Client) checkBatchLeased(ctx context.Context, checks []limit.Check) ([]limit.Result, error) {
	res := make([]limit.Result, len(checks))
	var rest []int
	for i := range checks {
		grouped := i > 0 && checks[i-1].Chained
		if grouped || !leasable(&checks[i]) || !c.leases.decide(&checks[i], &res[i]) {
			rest = append(rest, i)
		}
	}
	switch len(rest) {
	case 0:
		return res, nil
	case len(checks):
		return c.checkBatch(ctx, checks)
	}
	sub := make([]limit.Check, len(rest))
	for j, i := range rest {
		sub[j] = checks[i]
	}
	out, err := c.checkBatch(ctx, sub)
	if out == nil {
		return nil, err
	}
	for j, i := range rest {
		res[i] = out[j]
	}
	return res, err
}

// checkBatch sends checks to their owners: CheckBatch without leases.
func (c *Client) checkBatch(ctx context.Context, checks []limit.Check) ([]limit.Result, error) {
	c.inflight.Add(int64(len(checks)))
	defer c.inflight.Add(-int64(len(checks)))
	// Items by node, in batch order: a chained group, which shares one key,
	// stays together and in order.
	var order []*dest
	byDest := map[*dest][]int{}
	for i := range checks {
		d := c.route(checks[i].Key)
		if _, ok := byDest[d]; !ok {
			order = append(order, d)
		}
		byDest[d] = append(byDest[d], i)
	}
	if len(order) == 1 {
		return c.do(ctx, order[0], checks)
	}
	res := make([]limit.Result, len(checks))
	var errMu sync.Mutex
	var first error
	send := func(d *dest) {
		idx := byDest[d]
		sub := make([]limit.Check, len(idx))
		for j, i := range idx {
			sub[j] = checks[i]
		}
		out, err := c.do(ctx, d, sub)
		if err != nil {
			errMu.Lock()
			first = cmpErr(first, err)
			errMu.Unlock()
		}
		for j, i := range idx {
			if out != nil {
				res[i] = out[j]
			}
		}
	}
	var wg sync.WaitGroup
	for _, d := range order[:len(order)-1] {
		wg.Go(func() { send(d) })
	}
	send(order[len(order)-1])
	wg.Wait()
	if err := ctx.Err(); err != nil && first != nil {
		return nil, err
	}
	return res, first
}

func cmpErr(first, err error) error {
	if first == nil {
		return err
	}
	return first
}

// do sends checks to d and, for the checks no node could answer because d
// was unreachable, tries other nodes (see the package doc). It returns
// results for every check, with the last failure for those never answered,
// or nil and an error when ctx ended or the client was closed.
func (c *Client) do(ctx context.Context, d *dest, checks []limit.Check) ([]limit.Result, error) {
	res, err := d.bc.GetRateLimits(ctx, checks)
	for attempt := 1; err != nil; attempt++ {
		switch {
		case c.closed.Load():
			return nil, ErrClosed
		case ctx.Err() != nil:
			return nil, fmt.Errorf("client: %w", ctx.Err())
		case pastDeadline(ctx):
			// The RPC's own timer, set to ctx's deadline, fired a moment
			// before ctx's: it is ctx's deadline that ended the call.
			return nil, fmt.Errorf("client: %w", context.DeadlineExceeded)
		case res == nil: // refused before sending: d was closed, having left the ring
			res = unanswered(len(checks), err)
		}
		if attempt == maxAttempts || !retryable(err) {
			return res, err
		}
		d.suspend()
		var idx []int
		for i := range res {
			if res[i].Reason == limit.Unavailable {
				idx = append(idx, i)
			}
		}
		if len(idx) == 0 {
			return res, nil
		}
		sub := make([]limit.Check, len(idx))
		for j, i := range idx {
			sub[j] = checks[i]
		}
		d = c.retryDest(d, sub[0].Key)
		var out []limit.Result
		out, err = d.bc.GetRateLimits(ctx, sub)
		if out == nil {
			out = unanswered(len(sub), err)
		}
		for j, i := range idx {
			res[i] = out[j]
		}
	}
	return res, nil
}

// retryDest is where checks go after failing at prev: the owner of key by
// the current ring if that has changed and is live, else any live node.
func (c *Client) retryDest(prev *dest, key string) *dest {
	if d := c.route(key); d != prev {
		return d
	}
	return c.anyLive(prev)
}

// retryable reports whether checks that failed with err may be sent to
// another node: the node could not be reached, did not answer in time, or
// its connection was closed because it left the ring. An overloaded node
// is not avoided: the others would forward to it.
func retryable(err error) bool {
	return errors.Is(err, transport.ErrUnavailable) || errors.Is(err, transport.ErrTimeout) ||
		errors.Is(err, transport.ErrClosed)
}

// unanswered is the results of n checks that could not be sent.
func unanswered(n int, err error) []limit.Result {
	out := make([]limit.Result, n)
	for i := range out {
		out[i] = limit.Failed(limit.Unavailable, err)
	}
	return out
}

// pastDeadline reports whether ctx has a deadline and it has passed.
func pastDeadline(ctx context.Context) bool {
	dl, ok := ctx.Deadline()
	return ok && !time.Now().Before(dl)
}
