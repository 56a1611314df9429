package main

import (
	"testing"
	"time"

	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// assignment is an answer with one token bucket of tokens a second.
func assignment(tokens uint32, ttl time.Duration) *rlqspb.RateLimitQuotaResponse {
	tb := &typev3.TokenBucket{MaxTokens: tokens, TokensPerFill: wrapperspb.UInt32(tokens), FillInterval: durationpb.New(time.Second)}
	return &rlqspb.RateLimitQuotaResponse{BucketAction: []*rlqspb.RateLimitQuotaResponse_BucketAction{{
		BucketAction: &rlqspb.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction_{QuotaAssignmentAction: &rlqspb.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction{
			AssignmentTimeToLive: durationpb.New(ttl),
			RateLimitStrategy:    &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_TokenBucket{TokenBucket: tb}},
		}},
	}}}
}

// TestEnvoySimExpiredBehavior steps an instance wanting 100/s through an
// assignment of 10/s with a TTL of 2 s and its expired behaviour (timeout
// 3 s): the assignment's rate until t2, the behaviour until t5, then the
// bucket is abandoned and the instance admits all (no_assignment_behavior
// ALLOW_ALL). Each second admits what the named phase says.
func TestEnvoySimExpiredBehavior(t *testing.T) {
	t0 := time.Unix(1000, 0)
	for _, tc := range []struct {
		expired expiredBehavior
		want    []float64 // admitted in seconds 0 to 6
		phases  []simPhase
	}{
		{expiredBehavior{expiredDeny, 3 * time.Second}, []float64{10, 10, 0, 0, 0, 100, 100}, []simPhase{phaseAssigned, phaseExpired, phaseAbandoned}},
		{expiredBehavior{expiredAllow, 3 * time.Second}, []float64{10, 10, 100, 100, 100, 100, 100}, []simPhase{phaseAssigned, phaseExpired, phaseAbandoned}},
		{expiredBehavior{expiredReuse, 3 * time.Second}, []float64{10, 10, 10, 10, 10, 100, 100}, []simPhase{phaseAssigned, phaseExpired, phaseAbandoned}},
		{expiredBehavior{expiredDeny, 0}, []float64{10, 10, 100, 100, 100, 100, 100}, []simPhase{phaseAssigned, phaseAbandoned}},
	} {
		e := &envoySim{demand: 100, expired: tc.expired}
		e.apply(t0, 0, assignment(10, 2*time.Second))
		const dt = 10 * time.Millisecond
		for at := dt; at <= 7*time.Second; at += dt {
			e.tick(t0.Add(at-time.Nanosecond), dt, at-time.Nanosecond) // the arrivals of (at-dt, at), in second ⌊at⌋
		}
		for s, want := range tc.want {
			if got := e.admittedAt(s); got != want {
				t.Errorf("%+v: second %d admitted %v, want %v (all: %v)", tc.expired, s, got, want, e.admitted)
			}
		}
		var got []simPhase
		for _, p := range e.phases {
			got = append(got, p.phase)
		}
		if len(got) != len(tc.phases) {
			t.Fatalf("%+v: phases %v, want %v", tc.expired, e.phases, tc.phases)
		}
		for i := range got {
			if got[i] != tc.phases[i] {
				t.Errorf("%+v: phases %v, want %v", tc.expired, got, tc.phases)
			}
		}
		if at := e.phases[1].at; at < 2*time.Second || at > 2*time.Second+dt {
			t.Errorf("%+v: left the assignment at %v, want at its TTL's end, 2s", tc.expired, e.phases[1].at)
		}
		// A new assignment ends the abandonment.
		e.apply(t0.Add(7*time.Second), 7*time.Second, assignment(10, 2*time.Second))
		e.tick(t0.Add(7*time.Second+dt), dt, 7*time.Second+dt)
		if p := e.phases[len(e.phases)-1]; p.phase != phaseAssigned {
			t.Errorf("%+v: after a new assignment the phase is %v, want assigned", tc.expired, p.phase)
		}
	}
}
