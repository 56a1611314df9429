package main

import (
	"context"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/shardlimiter/shardlimiter/limit"
)

// schedule hands out the send times of calls to the workers. Both kinds
// are safe for concurrent use.
type schedule interface {
	// claim returns when the next call is due, given the current time;
	// ok is false once the run has no more calls to send.
	claim(now time.Time) (at time.Time, ok bool)
	// open reports whether latency is measured from the scheduled time.
	open() bool
}

// closedLoop sends each worker's next call as soon as its previous one is
// answered, until end. The offered load adapts to the server: a slow
// answer delays the next request, so latency is measured from the actual
// send and the tool's own queueing is invisible (coordinated omission).
type closedLoop struct{ end time.Time }

func (c closedLoop) claim(now time.Time) (time.Time, bool) { return now, now.Before(c.end) }
func (closedLoop) open() bool                              { return false }

// openLoop makes call n due at start + n×interval whatever the answers,
// for every n with a due time before end. A worker sends a call at its due
// time or, when every worker was busy, as soon as one is free; latency is
// measured from the due time, so a stalled server is charged the whole
// queue it caused instead of one slow answer.
type openLoop struct {
	start    time.Time
	interval float64 // ns between due times, may be fractional
	end      time.Time
	next     atomic.Int64
}

func newOpenLoop(start, end time.Time, callsPerSecond float64) *openLoop {
	return &openLoop{start: start, end: end, interval: 1e9 / callsPerSecond}
}

func (o *openLoop) claim(time.Time) (time.Time, bool) {
	at := o.due(o.next.Add(1) - 1)
	return at, at.Before(o.end)
}

func (o *openLoop) open() bool { return true }

func (o *openLoop) due(n int64) time.Time {
	return o.start.Add(time.Duration(math.Round(float64(n) * o.interval)))
}

// scheduled returns how many calls are due before end.
func (o *openLoop) scheduled() int64 {
	return int64(math.Ceil(float64(o.end.Sub(o.start)) / o.interval))
}

// lateAfter is how far behind its due time a send must start to count as
// late: well above timer and scheduler jitter on an idle machine.
const lateAfter = time.Millisecond

// outcome is what one call did.
type outcome struct {
	checks, admitted, rejected int64
	refused                    bool             // the server shed the call (RESOURCE_EXHAUSTED with a retry delay)
	rpcErr                     string           // kind of a failed call; "" when it was answered or refused
	itemErrs                   map[string]int64 // item errors by kind; nil when none
	backoff                    time.Duration    // wait this long before the next call (--backoff)
}

// call performs one RPC under ctx (the run's drain deadline; the call adds
// its own per-RPC deadline).
type call func(ctx context.Context) outcome

// drive runs one worker: claim a due time, wait for it, call, record;
// until the schedule is exhausted or ctx is done. A call that fails
// because ctx ended (Ctrl-C, drain deadline) is counted as abandoned, not
// as a server error.
func drive(ctx context.Context, s schedule, do call, rec *shard) {
	for ctx.Err() == nil {
		claimed := time.Now()
		at, ok := s.claim(claimed)
		if !ok || !sleepUntil(ctx, at) {
			return
		}
		start := time.Now()
		out := do(ctx)
		done := time.Now()
		if out.rpcErr != "" && ctx.Err() != nil {
			rec.abandon()
			return
		}
		from := start
		if s.open() {
			from = at
		}
		// lag = the wait for a free worker (claimed after due) + the
		// oversleep of this one (woke after due or after claiming).
		rec.record(done.Sub(from), delays{lag: start.Sub(at), oversleep: start.Sub(latest(at, claimed))}, out)
		if out.backoff > 0 && !sleepUntil(ctx, done.Add(out.backoff)) {
			return
		}
	}
}

// delays says how late a call left: lag after its due time, of which
// oversleep after the worker should have sent it (timer and scheduler
// delay: the tool's or the machine's CPU, not the server).
type delays struct{ lag, oversleep time.Duration }

func latest(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// sleepUntil waits until t; false if ctx ended first.
func sleepUntil(ctx context.Context, t time.Time) bool {
	d := time.Until(t)
	if d <= 0 {
		return ctx.Err() == nil
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-timer.C:
		return true
	}
}

// tally counts what calls did.
type tally struct {
	rpcs, checks, admitted, rejected int64
	refused                          int64 // calls shed by the server, not errors
	late, lateWakeups, abandoned     int64
	maxLag                           time.Duration
	errors                           map[string]int64
}

func (t *tally) add(o *tally) {
	t.rpcs += o.rpcs
	t.checks += o.checks
	t.admitted += o.admitted
	t.rejected += o.rejected
	t.refused += o.refused
	t.late += o.late
	t.lateWakeups += o.lateWakeups
	t.abandoned += o.abandoned
	t.maxLag = max(t.maxLag, o.maxLag)
	for k, v := range o.errors {
		t.countError(k, v)
	}
}

func (t *tally) countError(kind string, n int64) {
	if t.errors == nil {
		t.errors = map[string]int64{}
	}
	t.errors[kind] += n
}

func (t *tally) errorCount() (n int64) {
	for _, v := range t.errors {
		n += v
	}
	return n
}

// shard is one worker's recorder. Its mutex is contended only once a
// second, by the collector; the latency histogram holds answered calls,
// refusals has the latency of the calls the server shed.
type shard struct {
	mu       sync.Mutex
	hist     *Histogram
	refusals *Histogram
	t        tally
}

func newShard() *shard { return &shard{hist: newHistogram(), refusals: newHistogram()} }

func (s *shard) record(latency time.Duration, d delays, o outcome) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.t.rpcs++
	switch {
	case o.refused:
		s.t.refused++
		s.refusals.RecordDuration(latency)
	case o.rpcErr != "":
		s.t.countError(o.rpcErr, 1)
	default:
		s.hist.RecordDuration(latency)
		s.t.checks += o.checks
		s.t.admitted += o.admitted
		s.t.rejected += o.rejected
		for k, v := range o.itemErrs {
			s.t.countError(k, v)
		}
	}
	if d.lag > lateAfter {
		s.t.late++
	}
	if d.oversleep > lateAfter {
		s.t.lateWakeups++
	}
	s.t.maxLag = max(s.t.maxLag, d.lag)
}

func (s *shard) abandon() {
	s.mu.Lock()
	s.t.abandoned++
	s.mu.Unlock()
}

// drainInto moves what s recorded since the last drain into h, refusals
// and t.
func (s *shard) drainInto(h, refusals *Histogram, t *tally) {
	s.mu.Lock()
	defer s.mu.Unlock()
	h.Merge(s.hist)
	s.hist.Reset()
	refusals.Merge(s.refusals)
	s.refusals.Reset()
	t.add(&s.t)
	s.t = tally{}
}

// itemErrorKind names the kind of a failed item for the errors report.
func itemErrorKind(r limit.Reason) string { return "item:" + r.String() }
