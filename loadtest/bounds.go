package main

import (
	"github.com/shardlimiter/shardlimiter/internal/wide"
	"github.com/shardlimiter/shardlimiter/limit"
)

// attempt is one accuracy check as the client saw it, times in Unix ns
// (wall clock, the same clock the owner decides with).
type attempt struct {
	send, recv int64 // the call left at send and was answered at recv
	hits       int64
	admitted   bool
	fail       failure // failNone unless an error: neither admitted nor rejected
}

func (a attempt) failed() bool { return a.fail != failNone }

// failure is why an attempt was neither admitted nor rejected.
type failure uint8

const (
	failNone     failure = iota
	failItem             // the answer carried an item error
	failRPC              // the call failed
	failDeadline         // the call failed past its deadline (--rpc-timeout)
)

// The bounds below are on the hits one key may be admitted while all its
// decisions fall in [a, b]. The owner decides each check at some instant
// between its send and its answer, and a key's checks are sent one at a
// time, so a = the key's first send and b = its last answer enclose every
// decision. With P the period, L the limit, D = b − a:
//
//	TOKEN_BUCKET    C + ⌊D×L/P⌋, C = burst or L. GCRA admits h hits only while
//	                its debt after them is at most C×P/L, and each admission
//	                moves the theoretical arrival time forward by at least
//	                h×P/L from no earlier than a.
//	LEAKY_BUCKET    the same with C = burst + 1 (queue depth + the hit in
//	                service).
//	FIXED_WINDOW    L × (⌊b/P⌋ − ⌊a/P⌋ + 1): L per window aligned to the epoch,
//	                for every window [a, b] touches.
//	SLIDING_WINDOW  the same: the weighted estimate is at least the current
//	                window's count, so no aligned window admits more than L.
//	SLIDING_LOG     L × (⌊D/P⌋ + 1): any span shorter than P admits at most L,
//	                and [a, b] is covered by ⌊D/P⌋ + 1 half-open spans of P.
func bound(r limit.Rule, a, b int64) int64 {
	p, l, d := int64(r.Period), r.Limit, max(b-a, 0)
	switch r.Algorithm {
	case limit.TokenBucket:
		return wide.Add(r.Capacity(), wide.MulDivFloor(d, l, p))
	case limit.LeakyBucket:
		return wide.Add(r.Burst+1, wide.MulDivFloor(d, l, p))
	case limit.FixedWindow, limit.SlidingWindow:
		return wide.Mul(l, b/p-a/p+1)
	case limit.SlidingLog:
		return wide.Mul(l, d/p+1)
	}
	return 0
}

// boundFormula describes bound for the report.
func boundFormula(a limit.Algorithm) string {
	switch a {
	case limit.TokenBucket:
		return "capacity + ⌊span×limit/period⌋ per key"
	case limit.LeakyBucket:
		return "(burst+1) + ⌊span×limit/period⌋ per key"
	case limit.FixedWindow, limit.SlidingWindow:
		return "limit × epoch-aligned windows touched by the span, per key"
	case limit.SlidingLog:
		return "limit × (⌊span/period⌋ + 1) per key"
	}
	return ""
}

// expected returns the hits an exact limiter of r's algorithm admits for
// these attempts at their send times: what a perfect server would have
// answered. SLIDING_WINDOW's reference is the exact sliding log it
// approximates. Failed attempts are left out.
func expected(r limit.Rule, at []attempt) int64 {
	switch r.Algorithm {
	case limit.TokenBucket:
		return replayGCRA(r.Capacity(), r, at)
	case limit.LeakyBucket:
		return replayGCRA(r.Burst+1, r, at)
	case limit.FixedWindow:
		return replayFixed(r, at)
	}
	return replayLog(r, at)
}

// replayGCRA replays an exact token bucket of capacity c: h hits fit when
// the debt (tat − now) after them is at most c×P/L, compared in integers.
func replayGCRA(c int64, r limit.Rule, at []attempt) (n int64) {
	p, l := int64(r.Period), r.Limit
	var tat int64
	for _, x := range at {
		if x.failed() {
			continue
		}
		base := max(tat, x.send)
		if x.hits <= c && wide.MulLE(base-x.send, l, c-x.hits, p) {
			tat = base + wide.MulDivCeil(x.hits, p, l)
			n += x.hits
		}
	}
	return n
}

// replayFixed replays an exact fixed window aligned to the epoch.
func replayFixed(r limit.Rule, at []attempt) (n int64) {
	p := int64(r.Period)
	win, count := int64(-1), int64(0)
	for _, x := range at {
		if x.failed() {
			continue
		}
		if w := x.send / p; w != win {
			win, count = w, 0
		}
		if count+x.hits <= r.Limit {
			count += x.hits
			n += x.hits
		}
	}
	return n
}

// replayLog replays an exact sliding log: a hit at t counts while
// now − t < P; h hits are admitted when the counted hits plus h are at
// most L.
func replayLog(r limit.Rule, at []attempt) (n int64) {
	p := int64(r.Period)
	var log []attempt // admitted, oldest first
	var counted int64
	for _, x := range at {
		if x.failed() {
			continue
		}
		for len(log) > 0 && x.send-log[0].send >= p {
			counted -= log[0].hits
			log = log[1:]
		}
		if counted+x.hits <= r.Limit {
			log = append(log, x)
			counted += x.hits
			n += x.hits
		}
	}
	return n
}

// maxInPeriod returns the most hits admitted within any span shorter than
// P, by send times: an estimate, since the owner decided a little later.
func maxInPeriod(p int64, at []attempt) (most int64) {
	eachWindow(p, at, func(a attempt) int64 { return a.send }, func(in int64) { most = max(most, in) })
	return most
}

// spanViolations counts admissions that certainly broke "at most L hits
// in any span shorter than P": admitted j and the admitted hits since i
// exceed L while recv_j − send_i < P, so the decisions at i and j were
// less than P apart whatever the exact decision instants.
func spanViolations(r limit.Rule, at []attempt) (n int64) {
	eachWindow(int64(r.Period), at, func(a attempt) int64 { return a.recv }, func(in int64) {
		if in > r.Limit {
			n++
		}
	})
	return n
}

// eachWindow slides a window over the admitted attempts, in order: for
// each admitted attempt j it calls visit with the hits admitted by the
// attempts i ≤ j with end(j) − send(i) < p.
func eachWindow(p int64, at []attempt, end func(attempt) int64, visit func(in int64)) {
	var in int64
	i := 0
	for j := range at {
		if !at[j].admitted {
			continue
		}
		in += at[j].hits
		for ; i < j && end(at[j])-at[i].send >= p; i++ {
			if at[i].admitted {
				in -= at[i].hits
			}
		}
		visit(in)
	}
}
