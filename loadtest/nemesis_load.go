package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/shardlimiter/shardlimiter/limit"
)

// The load of --mode nemesis: closed-loop workers, each call a batch of
// 1–100 checks over every algorithm, a few hot keys (always over their
// limit) and many cold ones, to the nodes in turn.
const (
	nemesisHotKeys  = 2   // per algorithm
	nemesisColdKeys = 200 // per algorithm
	nemesisHotShare = 0.3 // of the checks
	nemesisMaxBatch = 100
	// nemesisMaxChecks bounds the checks recorded (16 bytes each); past
	// it the workers stop and the report says so.
	nemesisMaxChecks = 40_000_000
)

// nemesisAlgorithms are the algorithms of the load, one rule each.
var nemesisAlgorithms = []limit.Algorithm{limit.TokenBucket, limit.LeakyBucket, limit.FixedWindow, limit.SlidingWindow, limit.SlidingLog}

// check flags of a recorded check.
const (
	ckAdmitted uint8 = 1 << iota
	ckItemError
	ckCallFailed
)

// checkRec is one check as the client saw it, in 16 bytes: sent at send
// (Unix ns), answered lat ns later (capped at 4.29 s).
type checkRec struct {
	send  int64
	lat   uint32
	flags uint8
	node  uint8 // 1-based target
}

func (c checkRec) recv() int64 { return c.send + int64(c.lat) }

// callRec is one call: when, to which node, and whether it was answered.
type callRec struct {
	send, recv int64
	node       uint8
	failed     bool
	kind       string // the failure's kind, e.g. "rpc:Unavailable"
}

// keySpace names the load's keys: key k of algorithm a is index
// a×perAlg + k, the hot ones first.
type keySpace struct {
	names []string
	rules []limit.Rule // per algorithm
}

func (ks *keySpace) perAlg() int { return nemesisHotKeys + nemesisColdKeys }

func newKeySpace(id string, rule func(limit.Algorithm) limit.Rule) *keySpace {
	ks := &keySpace{}
	for _, a := range nemesisAlgorithms {
		ks.rules = append(ks.rules, rule(a))
		for k := range ks.perAlg() {
			kind := "c"
			if k < nemesisHotKeys {
				kind = "h"
			}
			ks.names = append(ks.names, fmt.Sprintf("nm-%s-%v-%s%d", id, a, kind, k))
		}
	}
	return ks
}

// recorder keeps every check per key and every call, sharded by key.
type recorder struct {
	mu     []sync.Mutex
	checks [][]checkRec // per key
	callMu sync.Mutex
	calls  []callRec
	total  int64 // checks recorded, under callMu
	full   bool
}

const recorderShards = 64

func newRecorder(keys int) *recorder {
	return &recorder{mu: make([]sync.Mutex, recorderShards), checks: make([][]checkRec, keys)}
}

// add records one call and its checks (keys[i] answered by res[i]); it
// reports false once the bound on recorded checks is reached.
func (r *recorder) add(c callRec, keys []int, res []limit.Result) bool {
	r.callMu.Lock()
	r.calls = append(r.calls, c)
	r.total += int64(len(keys))
	ok := r.total < nemesisMaxChecks
	r.full = r.full || !ok
	r.callMu.Unlock()
	lat := uint32(min(c.recv-c.send, int64(^uint32(0))))
	for i, k := range keys {
		rec := checkRec{send: c.send, lat: lat, node: c.node}
		switch {
		case c.failed:
			rec.flags = ckCallFailed
		case i >= len(res) || res[i].Error != "":
			rec.flags = ckItemError
		case res[i].Allowed:
			rec.flags = ckAdmitted
		}
		m := &r.mu[k%recorderShards]
		m.Lock()
		r.checks[k] = append(r.checks[k], rec)
		m.Unlock()
	}
	return ok
}

// nemesisWorker is one closed-loop sender.
type nemesisWorker struct {
	ks    *keySpace
	ts    []*target
	rec   *recorder
	hits  int64
	rng   *rand.Rand
	next  int
	rpcTO time.Duration
}

// run sends calls until ctx ends or the recorder is full. A worker whose
// calls keep failing (its nodes down) waits a little between them, so
// that it does not spin.
func (w *nemesisWorker) run(ctx context.Context) {
	checks := make([]limit.Check, 0, nemesisMaxBatch)
	keys := make([]int, 0, nemesisMaxBatch)
	failures := 0
	for ctx.Err() == nil {
		checks, keys = w.batch(checks[:0], keys[:0])
		node := w.next % len(w.ts)
		w.next++
		send := time.Now()
		cctx, cancel := context.WithTimeout(ctx, w.rpcTO)
		res, err := w.ts[node].conns[0].GetRateLimits(cctx, checks)
		cancel()
		recv := time.Now()
		if deadline, _ := ctx.Deadline(); err != nil && (ctx.Err() != nil || !recv.Before(deadline)) {
			return // the end of the run, not a fault
		}
		c := callRec{send: send.UnixNano(), recv: recv.UnixNano(), node: uint8(node + 1), failed: err != nil}
		if err != nil {
			c.kind = rpcErrorKind(err)
		}
		if !w.rec.add(c, keys, res) {
			return
		}
		if failures = failures + 1; err == nil {
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

// batch draws 1–100 checks.
func (w *nemesisWorker) batch(checks []limit.Check, keys []int) ([]limit.Check, []int) {
	n := 1 + w.rng.IntN(nemesisMaxBatch)
	per := w.ks.perAlg()
	for range n {
		a := w.rng.IntN(len(nemesisAlgorithms))
		k := nemesisHotKeys + w.rng.IntN(nemesisColdKeys)
		if w.rng.Float64() < nemesisHotShare {
			k = w.rng.IntN(nemesisHotKeys)
		}
		idx := a*per + k
		keys = append(keys, idx)
		checks = append(checks, limit.Check{Name: ruleName, Key: w.ks.names[idx], Hits: w.hits, Rule: w.ks.rules[a]})
	}
	return checks, keys
}
