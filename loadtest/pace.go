package main

import (
	"context"
	"sync"
	"time"

	"github.com/shardlimiter/shardlimiter/limit"
)

// paced is an open-loop schedule whose latency counts from the send: the
// pacing only fixes when checks leave, the judge uses the actual times.
type paced struct{ *openLoop }

func (paced) open() bool { return false }

// pace sends single checks for each key at accuracyRate from start, one
// at a time per key, check i of key k to target (k+i) mod n, and returns
// each key's attempts in send order and how many checks fell due.
func pace(ctx context.Context, cfg *config, ts []*target, rule limit.Rule, keys []string, start time.Time, shards []*shard) (logs [][]attempt, scheduled int64) {
	perKey := cfg.accuracyRate() / float64(len(keys))
	end := start.Add(cfg.duration)
	rctx, cancel := context.WithDeadline(ctx, end.Add(cfg.rpcTimeout+time.Second))
	defer cancel()
	logs = make([][]attempt, len(keys))
	var wg sync.WaitGroup
	for k, key := range keys {
		// Key k's checks are offset by k/len(keys) of the interval, so
		// that the keys' checks interleave evenly.
		phase := time.Duration(float64(k) / float64(len(keys)) * 1e9 / perKey)
		sched := paced{newOpenLoop(start.Add(phase), end, perKey)}
		scheduled += sched.scheduled()
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
				admitted: o.admitted > 0, fail: failureOf(o),
			})
			return o
		}
		wg.Go(func() { drive(rctx, sched, do, shards[k%len(shards)]) })
	}
	wg.Wait()
	return logs, scheduled
}

// failureOf classifies a single-check call that was not answered with a
// decision.
func failureOf(o outcome) failure {
	switch {
	case o.rpcErr == rpcDeadlineExceeded:
		return failDeadline
	case o.rpcErr != "", o.refused:
		return failRPC
	case len(o.itemErrs) > 0:
		return failItem
	}
	return failNone
}
