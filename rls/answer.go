package rls

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/shardlimiter/shardlimiter/limit"
	"github.com/shardlimiter/shardlimiter/rules"
	"github.com/shardlimiter/shardlimiter/transport"
)

// answer builds the response of p from the node's results.
func (s *Service) answer(p *request, results []limit.Result) *rlspb.RateLimitResponse {
	now := s.cfg.Now().UnixNano()
	resp := &rlspb.RateLimitResponse{
		OverallCode: rlspb.RateLimitResponse_OK,
		Statuses:    make([]*rlspb.RateLimitResponse_DescriptorStatus, len(p.descs)),
	}
	closest, closestAt := -1, -1 // descriptor and check closest to its limit
	var quotas, quotasOver int
	for i := range p.descs {
		d := &p.descs[i]
		st, j, final := s.status(p.domain, d, results, now)
		if final {
			resp.Statuses[i] = st
			continue
		}
		if d.quota {
			quotas++
		}
		switch {
		case st.Code != rlspb.RateLimitResponse_OVER_LIMIT:
			s.m.descriptors[resultUnderLimit].Inc()
		case d.shadow:
			s.m.descriptors[resultShadow].Inc()
			st.Code = rlspb.RateLimitResponse_OK
		case d.quota:
			s.m.descriptors[resultOverLimit].Inc()
			quotasOver++
		default:
			s.m.descriptors[resultOverLimit].Inc()
			resp.OverallCode = rlspb.RateLimitResponse_OVER_LIMIT
		}
		resp.Statuses[i] = st
		if d.kind == checked && (closest < 0 || closer(st, resp.Statuses[closest])) {
			closest, closestAt = i, d.first+j
		}
	}
	if quotas > 0 && quotasOver == quotas {
		resp.OverallCode = rlspb.RateLimitResponse_OVER_LIMIT // quota_mode: over only when every quota descriptor is
	}
	if s.cfg.Headers {
		resp.ResponseHeadersToAdd = s.headers(p, resp, results, closest, closestAt, now)
	}
	if resp.OverallCode == rlspb.RateLimitResponse_OVER_LIMIT && s.cfg.Shadow {
		s.m.nodeShadow.Inc()
		resp.OverallCode = rlspb.RateLimitResponse_OK
	}
	return resp
}

// status returns descriptor d's status and the index (within d's checks)
// of the check that speaks for it, and counts d in the per-rule statistics.
// final: d has no limit to apply (no rule, replaced, unlimited), its status
// is OK and nothing else about it counts.
func (s *Service) status(domain string, d *desc, results []limit.Result, now int64) (st *rlspb.RateLimitResponse_DescriptorStatus, j int, final bool) {
	switch d.kind {
	case noRule:
		s.m.descriptors[resultNoRule].Inc()
		return &rlspb.RateLimitResponse_DescriptorStatus{Code: rlspb.RateLimitResponse_OK}, 0, true
	case replaced:
		s.m.descriptors[resultReplaced].Inc()
		return &rlspb.RateLimitResponse_DescriptorStatus{Code: rlspb.RateLimitResponse_OK}, 0, true
	case unlimited:
		s.m.descriptors[resultUnlimited].Inc()
		return &rlspb.RateLimitResponse_DescriptorStatus{Code: rlspb.RateLimitResponse_OK, LimitRemaining: math.MaxUint32}, 0, true
	case blocked:
		st = descriptorStatus(d.limits[0], &limit.Result{Decision: limit.Decision{Allowed: d.hits == 0, ResetAt: windowEnd(d.limits[0].Rule, now)}}, now)
		s.rm.record(domain, d, nil)
		return st, 0, false
	}
	rs := results[d.first : d.first+d.n]
	j = reported(rs, d.hits)
	st = descriptorStatus(d.limits[j], &rs[j], now)
	s.rm.record(domain, d, rs)
	return st, j, false
}

// reported picks the check that speaks for its descriptor: one that
// refused, else the one with the least remaining. In a refused group every
// check answers refused; the one that refused is the one whose remaining
// does not cover the hits.
func reported(rs []limit.Result, hits int64) int {
	j, refused := 0, -1
	for k := range rs {
		if !rs[k].Allowed {
			if rs[k].Remaining < hits {
				return k
			}
			if refused < 0 {
				refused = k
			}
		}
		if rs[k].Remaining < rs[j].Remaining {
			j = k
		}
	}
	if refused >= 0 {
		return refused
	}
	return j
}

// closer reports whether a is closer to its limit than b: over the limit
// first, then the least remaining.
func closer(a, b *rlspb.RateLimitResponse_DescriptorStatus) bool {
	ao, bo := a.Code == rlspb.RateLimitResponse_OVER_LIMIT, b.Code == rlspb.RateLimitResponse_OVER_LIMIT
	if ao != bo {
		return ao
	}
	return a.LimitRemaining < b.LimitRemaining
}

// descriptorStatus is the status of a descriptor decided by r under l.
func descriptorStatus(l rules.Limit, r *limit.Result, now int64) *rlspb.RateLimitResponse_DescriptorStatus {
	st := &rlspb.RateLimitResponse_DescriptorStatus{
		Code: rlspb.RateLimitResponse_OK,
		CurrentLimit: &rlspb.RateLimitResponse_RateLimit{
			RequestsPerUnit: uint32(min(l.Rule.Limit, math.MaxUint32)),
			Unit:            unitOf(l.Unit),
		},
		LimitRemaining:     uint32(min(max(r.Remaining, 0), math.MaxUint32)),
		DurationUntilReset: durationpb.New(untilReset(r, now)),
	}
	if l.Named {
		st.CurrentLimit.Name = l.Name // a generated name is ours alone
	}
	if !r.Allowed {
		// Over the limit nothing remains, whatever the hits that were
		// refused would have left.
		st.Code, st.LimitRemaining = rlspb.RateLimitResponse_OVER_LIMIT, 0
	}
	return st
}

// windowEnd is when the window of r that holds now ends: a blocked limit
// (requests_per_unit: 0) reports the rest of its unit's window as its
// duration_until_reset, as envoyproxy/ratelimit does.
func windowEnd(r limit.Rule, now int64) int64 {
	switch {
	case r.Calendar != limit.NoCalendar:
		_, end := r.Calendar.Window(now)
		return end
	case r.Period > 0:
		p := int64(r.Period)
		return (now/p + 1) * p
	}
	return now
}

// untilReset is how long until r's key is back to full capacity or its
// window ends, never negative.
func untilReset(r *limit.Result, now int64) time.Duration {
	return time.Duration(max(r.ResetAt-now, 0))
}

// unitOf maps a rules unit name ("second" … "year") to Envoy's enum;
// anything else is UNKNOWN.
func unitOf(unit string) rlspb.RateLimitResponse_RateLimit_Unit {
	return rlspb.RateLimitResponse_RateLimit_Unit(rlspb.RateLimitResponse_RateLimit_Unit_value[strings.ToUpper(unit)])
}

// resultsError is the first item error among results, or nil.
func resultsError(results []limit.Result, want int) error {
	if len(results) != want {
		return fmt.Errorf("rls: node answered %d of %d checks", len(results), want)
	}
	for i := range results {
		if results[i].Error != "" {
			return &itemError{reason: results[i].Reason, msg: results[i].Error}
		}
	}
	return nil
}

// itemError is a check the node could not decide.
type itemError struct {
	reason limit.Reason
	msg    string
}

func (e *itemError) Error() string { return "rls: " + e.msg }

// callError is the status a failed call answers with: an invalid check
// (a limit override or hits_addend out of range) is InvalidArgument; an
// owner that could not be reached, or a node shutting down, Unavailable;
// a failure of the whole batch keeps the code the node's API would give it
// (a refusal for overload: ResourceExhausted with errdetails.RetryInfo).
func callError(err error) error {
	var ie *itemError
	if errors.As(err, &ie) {
		switch ie.reason {
		case limit.Invalid:
			return status.Error(codes.InvalidArgument, ie.Error())
		case limit.Unavailable, limit.Closing:
			return status.Error(codes.Unavailable, ie.Error())
		}
		return status.Error(codes.Internal, ie.Error())
	}
	if errors.Is(err, transport.ErrOverloaded) {
		return transport.GRPCStatus(err) // with its retry delay
	}
	return status.Error(transport.Code(err), "rls: "+err.Error())
}
