package rlqs

import (
	"context"
	"fmt"
	"io"
	"sync"
	"time"

	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/shardlimiter/shardlimiter/rules"
)

// stream is one Envoy instance's stream: its domain, its buckets and its
// report budget. Only the stream's goroutine touches it.
type stream struct {
	id      string // the instance's name on the owners: node/sequence
	domain  string
	buckets map[string]*streamBucket
	tokens  float64 // report budget
	filled  time.Time
	// waiting are the buckets whose owner asked to be asked again (an
	// assignment held back by another that ends soon), at retry.
	waiting []*streamBucket
	retry   *time.Timer
}

// streamBucket is what a stream knows of one of its buckets.
type streamBucket struct {
	id       *rlqspb.BucketId
	reported time.Time // last report of it
	until    time.Time // end of the TTL of the last assignment sent
	rate     float64   // its rate, requests per second (0: a blanket rule)
}

// StreamRateLimitQuotas serves one Envoy instance: each report is
// answered with the actions of its buckets (none for a bucket that gets
// no assignment, or whose owner could not be reached while its last
// assignment lasts).
func (s *Service) StreamRateLimitQuotas(st rlqspb.RateLimitQuotaService_StreamRateLimitQuotasServer) error {
	if n := s.streams.Add(1); n > int64(s.cfg.MaxStreams) {
		s.streams.Add(-1)
		s.m.refused.WithLabelValues("streams").Inc()
		return status.Errorf(codes.ResourceExhausted, "rlqs: %d streams open on this node, max %d: open it on another node", n-1, s.cfg.MaxStreams)
	}
	defer s.streams.Add(-1)
	ctx, cancel := context.WithCancel(st.Context())
	defer cancel()
	reports := make(chan *rlqspb.RateLimitQuotaUsageReports)
	recvErr := make(chan error, 1)
	go func() { // Recv blocks; the loop below must also see the listener stop
		for {
			msg, err := st.Recv()
			if err != nil {
				recvErr <- err
				return
			}
			select {
			case reports <- msg:
			case <-ctx.Done():
				return
			}
		}
	}()
	ss := &stream{id: fmt.Sprintf("%s/%d", s.cfg.Node, s.seq.Add(1)), buckets: map[string]*streamBucket{}}
	ss.retry = time.NewTimer(time.Hour)
	ss.retry.Stop()
	defer ss.retry.Stop()
	for {
		var msg *rlqspb.RateLimitQuotaUsageReports
		charge := true
		select {
		case msg = <-reports:
		case <-ss.retry.C:
			msg, charge = ss.refresh(), false // ours, not the instance's: not charged
		case err := <-recvErr:
			if err == io.EOF {
				return nil
			}
			return err
		case <-s.stopped.Done():
			return status.Error(codes.Unavailable, "rlqs: the node is stopping")
		case <-ctx.Done():
			return ctx.Err()
		}
		resp, err := s.report(ctx, ss, s.cfg.Now(), msg, charge)
		if err != nil {
			s.m.refused.WithLabelValues(status.Code(err).String()).Inc()
			return err
		}
		if len(resp.GetBucketAction()) > 0 {
			if err := st.Send(resp); err != nil {
				return err
			}
		}
	}
}

// admit spends one report of the stream's budget at now.
func (ss *stream) admit(now time.Time, rate float64) bool {
	burst := 2 * rate
	if ss.filled.IsZero() {
		ss.tokens = burst
	} else {
		ss.tokens = min(burst, ss.tokens+now.Sub(ss.filled).Seconds()*rate)
	}
	ss.filled = now
	if ss.tokens < 1 {
		return false
	}
	ss.tokens--
	return true
}

// minRetry is the shortest wait before the owners are asked again.
const minRetry = 50 * time.Millisecond

// pending is one bucket of a report on its way to its owner.
type pending struct {
	usage  *rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage
	bucket *streamBucket
	match  rules.QuotaMatch
	action *rlqspb.RateLimitQuotaResponse_BucketAction
	retry  time.Duration // ask again then (0: at the next report)
}

// refresh is the report that asks the owners again for the waiting
// buckets: no counts, time_elapsed 0 (no demand is learnt from it).
func (ss *stream) refresh() *rlqspb.RateLimitQuotaUsageReports {
	msg := &rlqspb.RateLimitQuotaUsageReports{Domain: ss.domain}
	seen := map[*streamBucket]bool{}
	for _, b := range ss.waiting {
		if seen[b] || ss.buckets[bucketName(b.id)] != b {
			continue // asked twice, or abandoned since
		}
		seen[b] = true
		msg.BucketQuotaUsages = append(msg.BucketQuotaUsages, &rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage{BucketId: b.id})
	}
	ss.waiting = nil
	return msg
}

// report checks msg, has each bucket decided by its owner and returns the
// answer to send; charge: msg is the instance's, counted against its
// budget of reports.
func (s *Service) report(ctx context.Context, ss *stream, now time.Time, msg *rlqspb.RateLimitQuotaUsageReports, charge bool) (*rlqspb.RateLimitQuotaResponse, error) {
	if charge && !ss.admit(now, s.cfg.MaxReportsPerSecond) {
		return nil, status.Errorf(codes.ResourceExhausted, "rlqs: more than %g reports per second on this stream", s.cfg.MaxReportsPerSecond)
	}
	items, err := s.accept(ss, now, msg)
	if err != nil {
		return nil, err
	}
	s.route(ctx, ss, now, items)
	resp := &rlqspb.RateLimitQuotaResponse{}
	retry := time.Duration(0)
	for _, p := range items {
		if p.retry > 0 {
			ss.waiting = append(ss.waiting, p.bucket)
			if retry == 0 || p.retry < retry {
				retry = p.retry
			}
		}
		if p.action.GetBucketAction() == nil {
			continue
		}
		if qa := p.action.GetQuotaAssignmentAction(); qa != nil {
			p.bucket.until = now.Add(qa.GetAssignmentTimeToLive().AsDuration())
			p.bucket.rate = strategyRate(qa)
		}
		resp.BucketAction = append(resp.BucketAction, p.action)
	}
	// Buckets the instance stopped reporting on (Envoy reports all its
	// buckets every interval): abandoned, and forgotten by the stream.
	for name, b := range ss.buckets {
		if now.Sub(b.reported) > 2*s.table.TTL() {
			resp.BucketAction = append(resp.BucketAction, abandonAction(b.id))
			delete(ss.buckets, name)
			s.m.abandonedStream.Inc()
		}
	}
	if retry > 0 {
		ss.retry.Reset(max(retry, minRetry))
	}
	return resp, nil
}

// accept validates msg against the stream's domain and bounds and returns
// its buckets, matched.
func (s *Service) accept(ss *stream, now time.Time, msg *rlqspb.RateLimitQuotaUsageReports) ([]*pending, error) {
	switch d := msg.GetDomain(); {
	case ss.domain == "" && d == "":
		return nil, status.Error(codes.InvalidArgument, "rlqs: the report has no domain: the first report of a stream must name one")
	case ss.domain == "":
		ss.domain = d
	case d != "" && d != ss.domain:
		return nil, status.Errorf(codes.InvalidArgument, "rlqs: the domain changed from %q to %q: open a new stream for another domain", ss.domain, d)
	}
	usages := msg.GetBucketQuotaUsages()
	if len(usages) > s.cfg.MaxBuckets {
		return nil, status.Errorf(codes.ResourceExhausted, "rlqs: %d buckets in one report, max %d", len(usages), s.cfg.MaxBuckets)
	}
	set := s.cfg.Rules.Load()
	items := make([]*pending, 0, len(usages))
	for i, u := range usages {
		if err := s.checkBucket(u.GetBucketId()); err != nil {
			return nil, status.Errorf(codes.InvalidArgument, "bucket_quota_usages[%d]: %v", i, err)
		}
		name := bucketName(u.GetBucketId())
		b := ss.buckets[name]
		if b == nil {
			if len(ss.buckets) >= s.cfg.MaxBuckets {
				return nil, status.Errorf(codes.ResourceExhausted, "rlqs: the stream reports more than %d buckets", s.cfg.MaxBuckets)
			}
			b = &streamBucket{id: u.GetBucketId()}
			ss.buckets[name] = b
		}
		b.reported = now
		items = append(items, &pending{usage: u, bucket: b, match: set.MatchQuota(ss.domain, u.GetBucketId().GetBucket())})
	}
	return items, nil
}

// route decides each item: the default for unmatched buckets, the table
// for the buckets owned here (their backups told before the answer), the
// owners' answers for the others (in parallel, one call per owner).
func (s *Service) route(ctx context.Context, ss *stream, now time.Time, items []*pending) {
	remote := map[string][]*pending{}
	var owned []*pending
	for _, p := range items {
		switch addr, self := s.owner(p.match); {
		case p.match.Rule == "":
			p.action = defaultAction(p.usage.GetBucketId(), p.match.Default, s.table.TTL())
		case self:
			p.action, p.retry = s.decideOwned(now, ss.id, ss.domain, p.match, p.usage, p.bucket.heldAt(now))
			s.m.reports.WithLabelValues("local").Inc()
			owned = append(owned, p)
		default:
			remote[addr] = append(remote[addr], p)
		}
	}
	var wg sync.WaitGroup
	for addr, ps := range remote {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.forward(ctx, ss, now, addr, ps)
		}()
	}
	keys := make([]string, len(owned))
	for i, p := range owned {
		if p.action.GetQuotaAssignmentAction() != nil {
			keys[i] = p.match.Key
		}
	}
	for i, ok := range s.replicateBefore(ctx, now, ss.id, keys) {
		if !ok {
			owned[i].action = &rlqspb.RateLimitQuotaResponse_BucketAction{} // nothing to send: the instance keeps what it holds
		}
	}
	wg.Wait()
}

func (s *Service) owner(m rules.QuotaMatch) (string, bool) {
	if s.cfg.Router == nil || m.Rule == "" {
		return "", true
	}
	return s.cfg.Router.Owner(m.Key)
}

// forward asks the owner at addr for the actions of ps. An owner that
// cannot be reached gets nothing sent for its buckets: Envoy keeps the
// assignment it holds until its TTL ends and then applies its
// expired_assignment_behavior (an instance holding none, its
// no_assignment_behavior). Not the domain's default: the bucket is
// limited, and an owner is unreachable mostly while the ring has not yet
// moved a crashed owner's buckets to their backup, for a few seconds; an
// ALLOW_ALL default then admitted every instance's whole demand, and an
// instance that had just opened this stream (its node crashed) got it at
// once, holding a live assignment the stream does not know.
func (s *Service) forward(ctx context.Context, ss *stream, now time.Time, addr string, ps []*pending) {
	usages := make([]*rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage, len(ps))
	hs := make([]held, len(ps))
	for i, p := range ps {
		usages[i], hs[i] = p.usage, p.bucket.heldAt(now)
	}
	actions, retries, err := s.remoteReport(ctx, addr, ss.id, ss.domain, usages, hs)
	if err == nil {
		s.m.reports.WithLabelValues("forwarded").Add(float64(len(ps)))
		for i, p := range ps {
			p.action, p.retry = actions[i], retries[i]
		}
		return
	}
	s.m.reports.WithLabelValues("owner_unreachable").Add(float64(len(ps))) // counted, not logged: once per report and stream
	for _, p := range ps {
		p.action = &rlqspb.RateLimitQuotaResponse_BucketAction{} // nothing to send
	}
}
