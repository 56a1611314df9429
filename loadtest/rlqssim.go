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
// as the example's no_assignment_behavior; DENY_ALL once an assignment's
// TTL has ended, as its expired_assignment_behavior) and its counts.
type envoySim struct {
	mu      sync.Mutex
	demand  float64
	carry   float64 // fractional arrivals
	allowed uint64  // since the last report
	denied  uint64

	assigned bool // any assignment yet
	deny     bool // DENY_ALL
	allowAll bool
	bucket   *typev3.TokenBucket
	tokens   float64
	lastFill time.Time
	expires  time.Time

	admitted []float64       // per second of the run
	rates    []rateAt        // the assignment's rate over time
	reports  []time.Duration // when it reported, since the start
}

// rateAt is the rate an instance was assigned from at on.
type rateAt struct {
	at   time.Duration
	rate float64 // requests per second; +Inf for ALLOW_ALL
}

// tick admits the arrivals of dt at now; second is the run's second.
func (e *envoySim) tick(now time.Time, dt time.Duration, second int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.carry += e.demand * dt.Seconds()
	n := math.Floor(e.carry)
	e.carry -= n
	if n == 0 {
		return
	}
	ok := n
	switch {
	case !e.assigned || e.allowAll && now.Before(e.expires):
	case e.deny || !now.Before(e.expires) || e.bucket == nil:
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
		e.expires = now.Add(qa.GetAssignmentTimeToLive().AsDuration())
		s := qa.GetRateLimitStrategy()
		tb := s.GetTokenBucket()
		if tb != nil && e.bucket != nil && sameBucket(tb, e.bucket) && !e.deny && !e.allowAll {
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

// play runs the instance on its stream until ctx is done: ticks of 10 ms,
// a first report at phase (Envoy instances start at different times) and
// one every interval after it, answers applied as they come.
func (e *envoySim) play(ctx context.Context, st rlqspb.RateLimitQuotaService_StreamRateLimitQuotasClient, c *rlqsConfig, start time.Time, phase time.Duration, demandAt func(time.Duration) float64) error {
	recvErr := make(chan error, 1)
	go func() {
		for {
			resp, err := st.Recv()
			if err != nil {
				recvErr <- err
				return
			}
			now := time.Now()
			e.apply(now, now.Sub(start), resp)
		}
	}()
	bucket := map[string]string{"tenant": c.tenant}
	const dt = 10 * time.Millisecond
	tick := time.NewTicker(dt)
	defer tick.Stop()
	last, lastReport := start, time.Time{}
	for {
		select {
		case <-ctx.Done():
			st.CloseSend()
			return nil
		case err := <-recvErr:
			return err
		case now := <-tick.C:
			e.mu.Lock()
			e.demand = 0 // an instance's traffic starts with its first report, as Envoy reports a bucket's first request at once
			if now.Sub(start) >= phase {
				e.demand = demandAt(now.Sub(start))
			}
			e.mu.Unlock()
			e.tick(now, now.Sub(last), int(now.Sub(start)/time.Second))
			last = now
			elapsed := now.Sub(lastReport)
			if lastReport.IsZero() && now.Sub(start) >= phase {
				elapsed = 0 // the first report: time_elapsed 0
			} else if lastReport.IsZero() || elapsed < c.interval {
				continue
			}
			if err := st.Send(e.report(c.domain, bucket, elapsed)); err != nil {
				return err
			}
			e.mu.Lock()
			e.reports = append(e.reports, now.Sub(start))
			e.mu.Unlock()
			lastReport = now
		}
	}
}
