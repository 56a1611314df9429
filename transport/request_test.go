package transport

import (
	"bytes"
	"math/rand/v2"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/shardlimiter/shardlimiter/limit"
	"github.com/shardlimiter/shardlimiter/transport/pb"
)

// randCheck draws a check, including values the node would refuse: the
// encoder must carry them as checkToProto does.
func randCheck(r *rand.Rand) limit.Check {
	durs := []time.Duration{0, 1, time.Millisecond, 1500 * time.Microsecond, -time.Second, limit.MaxPeriod, time.Duration(r.Int64())}
	return limit.Check{Name: randString(r), Key: randString(r), Hits: randInt(r),
		Rule: limit.Rule{
			Algorithm:   limit.Algorithm(r.IntN(256)),
			Limit:       randInt(r),
			Period:      durs[r.IntN(len(durs))],
			Burst:       randInt(r),
			MinInterval: durs[r.IntN(len(durs))],
			Warmup:      durs[r.IntN(len(durs))],
			Behavior:    limit.Behavior([]uint32{0, 1, 3, 0x80000000, 0xffffffff}[r.IntN(5)]),
		}}
}

func protoRequest(checks []limit.Check) *pb.GetRateLimitsRequest {
	m := &pb.GetRateLimitsRequest{}
	for i := range checks {
		var req pb.RateLimitRequest
		checkToProto(&checks[i], &req)
		m.Requests = append(m.Requests, &req)
	}
	return m
}

func TestRequestEncoderMatchesProto(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(9, 10))
	for range 2000 {
		checks := make([]limit.Check, r.IntN(10))
		for i := range checks {
			checks[i] = randCheck(r)
		}
		offs := make([]int, len(checks)+1)
		got, err := appendChecks(nil, checks, offs)
		if err != nil {
			t.Fatalf("appendChecks(%+v) = %v", checks, err)
		}
		if len(got) != sizeChecks(checks) {
			t.Fatalf("appendChecks wrote %d bytes, sizeChecks = %d", len(got), sizeChecks(checks))
		}
		checkSameAsProto(t, protoRequest(checks), got)
		fwd := &pb.ForwardRateLimitsRequest{Requests: protoRequest(checks).Requests}
		checkSameAsProto(t, fwd, got)
		for i := range checks { // every run of checks is a request of its own
			one, _ := deterministic.Marshal(protoRequest(checks[i : i+1]))
			if run := got[offs[i]:offs[i+1]]; !bytes.Equal(run, one) {
				t.Fatalf("item %d encoded %x, want %x", i, run, one)
			}
		}
	}
}

func TestRequestEncoderInvalidUTF8(t *testing.T) {
	t.Parallel()
	for _, c := range []limit.Check{{Name: "\xff"}, {Key: "a\xc3"}} {
		if _, err := appendChecks(nil, []limit.Check{c}, nil); err == nil {
			t.Errorf("appendChecks(%+v) = nil error, want one", c)
		}
		if _, err := proto.Marshal(protoRequest([]limit.Check{c})); err == nil {
			t.Errorf("proto.Marshal(%+v) = nil error; the test case is wrong", c)
		}
	}
}
