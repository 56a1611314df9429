package main

import (
	"context"
	"math"
	"sync"
	"time"

	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/durationpb"
)

// envoySim is one simulated Envoy instance: its demand, the assignment it
// enforces (as Envoy's filter does: a token bucket full at first, refilled
// by tokens_per_fill every fill_interval; ALLOW_ALL before any assignment,
// as the example's no_assignment_behavior; once an assignment's TTL has
// ended, its expired behaviour, expiredBehavior) and its counts.
type envoySim struct {
	mu      sync.Mutex
	demand  float64
	carry   float64 // fractional arrivals
	allowed uint64  // since the last report
	denied  uint64
	expired expiredBehavior

	assigned bool // an assignment, not abandoned since
	deny     bool // DENY_ALL
	allowAll bool
	bucket   *typev3.TokenBucket
	tokens   float64
	lastFill time.Time
	expires  time.Time
	phase    simPhase

	admitted   []float64       // per second of the run
	rates      []rateAt        // the assignment's rate over time
	reports    []time.Duration // when it reported, since the start
	phases     []phaseAt       // when it changed phase, since the start
	reconnects int             // streams opened after the first
	lastAction time.Duration   // when the last assignment came, since the start
	lastTTL    time.Duration   // its TTL
}

// expiredBehavior is Envoy's expired_assignment_behavior
// (RateLimitQuotaBucketSettings.ExpiredAssignmentBehavior): once an
// assignment's TTL has ended without a new one, the instance applies
// fallback_rate_limit (deny or allow, a blanket rule) or
// reuse_last_assignment (reuse: the last token bucket, extended), for
// expired_assignment_behavior_timeout; after that the bucket is
// abandoned and its requests get the no_assignment_behavior again
// (ALLOW_ALL here) until a new assignment comes. A zero timeout abandons
// the bucket at once, as the proto says of an unset one.
type expiredBehavior struct {
	kind    string // expiredDeny, expiredAllow or expiredReuse
	timeout time.Duration
}

const (
	expiredDeny  = "deny"
	expiredAllow = "allow"
	expiredReuse = "reuse"
)

// simPhase is what decides an instance's requests.
type simPhase int

const (
	phaseNone      simPhase = iota // no assignment yet: no_assignment_behavior
	phaseAssigned                  // an assignment within its TTL
	phaseExpired                   // its TTL ended: expired_assignment_behavior
	phaseAbandoned                 // the behaviour's timeout ended: no_assignment_behavior again
)

func (p simPhase) String() string {
	return [...]string{"none", "assigned", "expired", "abandoned"}[p]
}

// phaseAt is a phase an instance entered at at (since the start).
type phaseAt struct {
	at    time.Duration
	phase simPhase
}

// rateAt is the rate an instance was assigned from at on.
type rateAt struct {
	at   time.Duration
	rate float64 // requests per second; +Inf for ALLOW_ALL
}

// phaseAtLocked returns the phase at now, recording a change (offset is
// now since the start).
func (e *envoySim) phaseAtLocked(now time.Time, offset time.Duration) simPhase {
	p := phaseNone
	switch {
	case e.assigned && now.Before(e.expires):
		p = phaseAssigned
	case e.assigned && now.Before(e.expires.Add(e.expired.timeout)):
		p = phaseExpired
	case e.assigned:
		e.assigned = false // abandoned: a new assignment starts it again
		p = phaseAbandoned
	case e.phase == phaseAbandoned:
		p = phaseAbandoned
	}
	if p != e.phase {
		e.phase = p
		e.phases = append(e.phases, phaseAt{at: offset, phase: p})
	}
	return p
}

// tick admits the arrivals of dt at now (offset since the start).
func (e *envoySim) tick(now time.Time, dt, offset time.Duration) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.carry += e.demand * dt.Seconds()
	n := math.Floor(e.carry)
	e.carry -= n
	phase := e.phaseAtLocked(now, offset)
	if n == 0 {
		return
	}
	ok := n
	switch {
	case phase == phaseNone || phase == phaseAbandoned: // ALLOW_ALL
	case phase == phaseExpired && e.expired.kind == expiredAllow:
	case phase == phaseExpired && e.expired.kind != expiredReuse, e.deny:
		ok = 0
	case e.allowAll:
	case e.bucket == nil:
		ok = 0
	default:
		fill := e.bucket.GetFillInterval().AsDuration()
		for fill > 0 && !now.Before(e.lastFill.Add(fill)) {
			e.tokens = min(float64(e.bucket.GetMaxTokens()), e.tokens+float64(e.bucket.GetTokensPerFill().GetValue()))
			e.lastFill = e.lastFill.Add(fill)
		}
		ok = min(n, e.tokens)
		e.tokens -= ok
	}
	e.allowed += uint64(ok)
	e.denied += uint64(n - ok)
	second := int(offset / time.Second)
	for len(e.admitted) <= second {
		e.admitted = append(e.admitted, 0)
	}
	e.admitted[second] += ok
}

// report takes the counts since the last report.
func (e *envoySim) report(domain string, bucket map[string]string, elapsed time.Duration) *rlqspb.RateLimitQuotaUsageReports {
	e.mu.Lock()
	defer e.mu.Unlock()
	u := &rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage{
		BucketId:           &rlqspb.BucketId{Bucket: bucket},
		TimeElapsed:        durationpb.New(elapsed.Truncate(time.Second)), // Envoy's resolution
		NumRequestsAllowed: e.allowed, NumRequestsDenied: e.denied,
	}
	e.allowed, e.denied = 0, 0
	return &rlqspb.RateLimitQuotaUsageReports{Domain: domain, BucketQuotaUsages: []*rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage{u}}
}

// apply takes the actions of an answer at now (offset since the start).
func (e *envoySim) apply(now time.Time, offset time.Duration, resp *rlqspb.RateLimitQuotaResponse) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, a := range resp.GetBucketAction() {
		qa := a.GetQuotaAssignmentAction()
		if qa == nil { // abandoned: back to no assignment
			e.assigned = false
			continue
		}
		e.lastTTL = qa.GetAssignmentTimeToLive().AsDuration()
		e.expires, e.lastAction = now.Add(e.lastTTL), offset
		s := qa.GetRateLimitStrategy()
		tb := s.GetTokenBucket()
		if tb != nil && e.assigned && e.bucket != nil && sameBucket(tb, e.bucket) && !e.deny && !e.allowAll {
			continue // the same strategy only extends the TTL
		}
		e.assigned = true
		e.bucket, e.deny, e.allowAll = tb, false, false
		rate := math.Inf(1)
		switch {
		case tb != nil:
			e.tokens, e.lastFill = float64(tb.GetMaxTokens()), now
			rate = float64(tb.GetTokensPerFill().GetValue()) / tb.GetFillInterval().AsDuration().Seconds()
		case s.GetBlanketRule() == typev3.RateLimitStrategy_DENY_ALL:
			e.deny, rate = true, 0
		default:
			e.allowAll = true
		}
		e.rates = append(e.rates, rateAt{at: offset, rate: rate})
	}
}

func sameBucket(a, b *typev3.TokenBucket) bool {
	return a.GetMaxTokens() == b.GetMaxTokens() && a.GetTokensPerFill().GetValue() == b.GetTokensPerFill().GetValue() &&
		a.GetFillInterval().AsDuration() == b.GetFillInterval().AsDuration()
}

// rateAtTime returns the rate assigned at offset (NaN before any).
func (e *envoySim) rateAtTime(offset time.Duration) float64 {
	r := math.NaN()
	for _, x := range e.rates {
		if x.at > offset {
			break
		}
		r = x.rate
	}
	return r
}

// quotaStream is an instance's stream to the quota service.
type quotaStream = rlqspb.RateLimitQuotaService_StreamRateLimitQuotasClient

// streamOpener opens an instance's attempt-th stream (0 first).
type streamOpener func(attempt int) (quotaStream, error)

// simConn is an instance's stream, reopened when it fails. Only the
// instance's play goroutine calls its methods.
type simConn struct {
	ctx     context.Context
	open    streamOpener
	apply   func(*rlqspb.RateLimitQuotaResponse)
	st      quotaStream // nil: failed, to be opened again
	attempt int
	ended   chan streamErr // each stream's receiver sends its end
	first   error          // the first stream error
}

// streamErr is how the stream of an attempt ended.
type streamErr struct {
	attempt int
	err     error
}

// receive applies the answers of st (attempt) until it fails.
func (sc *simConn) receive(st quotaStream, attempt int) {
	for {
		resp, err := st.Recv()
		if err != nil {
			select {
			case sc.ended <- streamErr{attempt, err}:
			case <-sc.ctx.Done():
			}
			return
		}
		sc.apply(resp)
	}
}

// end notes how a stream ended; the one in use is opened again at the
// next send.
func (sc *simConn) end(se streamErr) {
	if se.attempt != sc.attempt {
		return // an earlier stream's
	}
	if sc.first == nil && sc.ctx.Err() == nil {
		sc.first = se.err
	}
	sc.st = nil
}

// send sends msg, first opening a stream when none is open; it reports
// whether msg went out and whether a stream was opened again.
func (sc *simConn) send(msg *rlqspb.RateLimitQuotaUsageReports) (sent, reopened bool) {
	if sc.st == nil {
		sc.attempt++
		st, err := sc.open(sc.attempt)
		if err != nil {
			sc.end(streamErr{sc.attempt, err})
			return false, false
		}
		sc.st, reopened = st, true
		go sc.receive(st, sc.attempt)
	}
	// An error here means the stream broke: its receiver says why.
	return sc.st.Send(msg) == nil, reopened
}

// play runs the instance until ctx is done: ticks of 10 ms, a first
// report at phase (Envoy instances start at different times) and one
// every interval after it, answers applied as they come. A stream that
// fails is opened again at the next report, as Envoy's filter does, the
// assignment kept meanwhile (its TTL and expired behaviour apply); play
// returns the first stream error (nil if none) when ctx is done, or an
// error of open at once when the first stream does not open.
func (e *envoySim) play(ctx context.Context, open streamOpener, c *rlqsConfig, start time.Time, phase time.Duration, demandAt func(time.Duration) float64) error {
	st, err := open(0)
	if err != nil {
		return err
	}
	sc := &simConn{ctx: ctx, open: open, st: st, ended: make(chan streamErr), apply: func(resp *rlqspb.RateLimitQuotaResponse) {
		now := time.Now()
		e.apply(now, now.Sub(start), resp)
	}}
	go sc.receive(st, 0)
	bucket := map[string]string{"tenant": c.tenant}
	const dt = 10 * time.Millisecond
	tick := time.NewTicker(dt)
	defer tick.Stop()
	last, lastReport := start, time.Time{}
	for {
		select {
		case <-ctx.Done():
			if sc.st != nil {
				sc.st.CloseSend()
			}
			return sc.first
		case se := <-sc.ended:
			sc.end(se)
		case now := <-tick.C:
			offset := now.Sub(start)
			// Steps of dt up to now, each at its own instant: a tick that
			// comes late (a loaded machine) admits its arrivals when they
			// came, not all at once in a later second.
			for ; !last.Add(dt).After(now); last = last.Add(dt) {
				at := last.Add(dt)
				e.mu.Lock()
				e.demand = 0 // an instance's traffic starts with its first report, as Envoy reports a bucket's first request at once
				if at.Sub(start) >= phase {
					e.demand = demandAt(at.Sub(start))
				}
				e.mu.Unlock()
				e.tick(at, dt, at.Sub(start))
			}
			elapsed := now.Sub(lastReport)
			if lastReport.IsZero() && offset >= phase {
				elapsed = 0 // the first report: time_elapsed 0
			} else if lastReport.IsZero() || elapsed < c.interval {
				continue
			}
			if e.sendReport(sc, c, bucket, elapsed, offset) || sc.st == nil {
				lastReport = now // sent, or no stream opens: at the next report
			}
		}
	}
}

// sendReport sends the report of the counts since the last one; the
// counts of one not sent stay for the next.
func (e *envoySim) sendReport(sc *simConn, c *rlqsConfig, bucket map[string]string, elapsed, offset time.Duration) bool {
	msg := e.report(c.domain, bucket, elapsed)
	sent, reopened := sc.send(msg)
	e.mu.Lock()
	defer e.mu.Unlock()
	if reopened {
		e.reconnects++
	}
	if !sent {
		for _, u := range msg.GetBucketQuotaUsages() {
			e.allowed += u.GetNumRequestsAllowed()
			e.denied += u.GetNumRequestsDenied()
		}
		return false
	}
	e.reports = append(e.reports, offset)
	return true
}
