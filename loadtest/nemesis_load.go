package main

import (
	"context"
	"math/rand/v2"
	"time"

	"github.com/shardlimiter/shardlimiter/limit"
	"github.com/shardlimiter/shardlimiter/loadtest/nemesis"
)

// nemesisWorker is one closed-loop sender.
type nemesisWorker struct {
	ks    *nemesis.KeySpace
	ts    []*target
	ready func(i int) bool // node i+1 takes calls
	rec   *nemesis.Recorder
	hits  int64
	rng   *rand.Rand
	next  int
	rpcTO time.Duration
}

// run sends calls until ctx ends or the recorder is full. A worker whose
// calls keep failing (its nodes down) waits a little between them, so
// that it does not spin.
func (w *nemesisWorker) run(ctx context.Context) {
	checks := make([]limit.Check, 0, nemesis.MaxBatch)
	keys := make([]int, 0, nemesis.MaxBatch)
	failures := 0
	for ctx.Err() == nil {
		checks, keys = w.batch(checks[:0], keys[:0])
		node := w.pick()
		send := time.Now()
		cctx, cancel := context.WithTimeout(ctx, w.rpcTO)
		res, err := w.ts[node].conns[0].GetRateLimits(cctx, checks)
		cancel()
		recv := time.Now()
		if deadline, _ := ctx.Deadline(); err != nil && (ctx.Err() != nil || !recv.Before(deadline)) {
			return // the end of the run, not a fault
		}
		c := nemesis.Call{Send: send.UnixNano(), Recv: recv.UnixNano(), Node: uint8(node + 1), Failed: err != nil}
		if err != nil {
			c.Kind = rpcErrorKind(err)
		}
		if !w.rec.Add(c, keys, res) {
			return
		}
		failures++
		if err == nil {
			failures = 0
		}
		if failures >= len(w.ts) {
			select {
			case <-ctx.Done():
			case <-time.After(20 * time.Millisecond):
			}
		}
	}
}

// pick returns the next node in turn that is ready, or the next one when
// none is.
func (w *nemesisWorker) pick() int {
	first := w.next % len(w.ts)
	for range w.ts {
		i := w.next % len(w.ts)
		w.next++
		if w.ready(i) {
			return i
		}
	}
	return first
}

// batch draws 1–100 checks.
func (w *nemesisWorker) batch(checks []limit.Check, keys []int) ([]limit.Check, []int) {
	n := 1 + w.rng.IntN(nemesis.MaxBatch)
	per := w.ks.PerAlg()
	for range n {
		a := w.rng.IntN(len(nemesis.Algorithms))
		k := nemesis.HotKeys + w.rng.IntN(nemesis.ColdKeys)
		if w.rng.Float64() < nemesis.HotShare {
			k = w.rng.IntN(nemesis.HotKeys)
		}
		idx := a*per + k
		keys = append(keys, idx)
		checks = append(checks, limit.Check{Name: ruleName, Key: w.ks.Names[idx], Hits: w.hits, Rule: w.ks.Rules[a]})
	}
	return checks, keys
}
