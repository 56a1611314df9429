package transport

import (
	"math"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/shardlimiter/shardlimiter/limit"
	"github.com/shardlimiter/shardlimiter/transport/pb"
)

func TestCheckFromProto(t *testing.T) {
	t.Parallel()
	full := func(edit func(r *pb.RateLimitRequest)) *pb.RateLimitRequest {
		r := &pb.RateLimitRequest{Name: "api", UniqueKey: "account:42", Hits: 2, Limit: 100,
			DurationMs: 60_000, Algorithm: pb.Algorithm_SLIDING_LOG, MinIntervalMs: 10,
			Behavior: pb.Behavior_RESET | pb.Behavior_COUNT_REJECTED}
		if edit != nil {
			edit(r)
		}
		return r
	}
	maxMs := int64(limit.MaxPeriod / time.Millisecond)
	tests := []struct {
		name    string
		req     *pb.RateLimitRequest
		want    limit.Check
		wantErr string
	}{
		{name: "all fields", req: full(nil), want: limit.Check{Name: "api", Key: "account:42", Hits: 2,
			Rule: limit.Rule{Algorithm: limit.SlidingLog, Limit: 100, Period: time.Minute,
				MinInterval: 10 * time.Millisecond, Behavior: limit.Reset | limit.CountRejected}}},
		{name: "warmup and burst", req: full(func(r *pb.RateLimitRequest) {
			r.Algorithm, r.MinIntervalMs, r.WarmupMs, r.Burst, r.Behavior = pb.Algorithm_TOKEN_BUCKET, 0, 5000, 7, 0
		}), want: limit.Check{Name: "api", Key: "account:42", Hits: 2,
			Rule: limit.Rule{Algorithm: limit.TokenBucket, Limit: 100, Period: time.Minute, Burst: 7, Warmup: 5 * time.Second}}},
		{name: "longest period", req: full(func(r *pb.RateLimitRequest) { r.DurationMs = maxMs }),
			want: limit.Check{Name: "api", Key: "account:42", Hits: 2, Rule: limit.Rule{Algorithm: limit.SlidingLog,
				Limit: 100, Period: limit.MaxPeriod, MinInterval: 10 * time.Millisecond, Behavior: limit.Reset | limit.CountRejected}}},
		{name: "zero duration", req: full(func(r *pb.RateLimitRequest) { r.DurationMs = 0 }),
			wantErr: "duration_ms must be > 0, got 0"},
		{name: "negative duration", req: full(func(r *pb.RateLimitRequest) { r.DurationMs = -1 }),
			wantErr: "duration_ms must be > 0, got -1"},
		{name: "duration beyond MaxPeriod", req: full(func(r *pb.RateLimitRequest) { r.DurationMs = maxMs + 1 }),
			wantErr: "duration_ms must be <= 31622400000, got 31622400001"},
		{name: "duration that would wrap", req: full(func(r *pb.RateLimitRequest) { r.DurationMs = math.MaxInt64 }),
			wantErr: "duration_ms must be <= 31622400000, got 9223372036854775807"},
		{name: "negative min interval", req: full(func(r *pb.RateLimitRequest) { r.MinIntervalMs = -5 }),
			wantErr: "min_interval_ms must be >= 0, got -5"},
		{name: "huge min interval", req: full(func(r *pb.RateLimitRequest) { r.MinIntervalMs = math.MaxInt64 / 1000 }),
			wantErr: "min_interval_ms must be <= 31622400000, got 9223372036854775"},
		{name: "negative warmup", req: full(func(r *pb.RateLimitRequest) { r.WarmupMs = math.MinInt64 }),
			wantErr: "warmup_ms must be >= 0, got -9223372036854775808"},
		{name: "huge warmup", req: full(func(r *pb.RateLimitRequest) { r.WarmupMs = maxMs + 1 }),
			wantErr: "warmup_ms must be <= 31622400000, got 31622400001"},
		{name: "unknown algorithm", req: full(func(r *pb.RateLimitRequest) { r.Algorithm = 5 }),
			wantErr: "unknown algorithm 5"},
		{name: "negative algorithm", req: full(func(r *pb.RateLimitRequest) { r.Algorithm = -1 }),
			wantErr: "unknown algorithm -1"},
		{name: "unknown behavior", req: full(func(r *pb.RateLimitRequest) { r.Behavior = 4 | pb.Behavior_RESET }),
			wantErr: "unknown behavior flags 0x4"},
		{name: "negative behavior", req: full(func(r *pb.RateLimitRequest) { r.Behavior = -1 }),
			wantErr: "unknown behavior flags 0xfffffffc"},
		{name: "nil request", req: nil, wantErr: "duration_ms must be > 0, got 0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := checkFromProto(tt.req)
			if tt.wantErr != "" {
				if err == nil || err.Error() != tt.wantErr {
					t.Fatalf("checkFromProto(%v) = %+v, %v, want error %q", tt.req, got, err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("checkFromProto(%v) = %+v, %v, want %+v", tt.req, got, err, tt.want)
			}
		})
	}
}

func TestCheckRoundTrip(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		in   limit.Check
		want limit.Check // after checkToProto then checkFromProto
	}{
		{name: "whole milliseconds", in: limit.Check{Name: "n", Key: "k", Hits: 3, Rule: limit.Rule{
			Algorithm: limit.TokenBucket, Limit: 5, Period: time.Hour, Burst: 9, Warmup: time.Minute, Behavior: limit.Reset}}},
		{name: "every algorithm field", in: limit.Check{Name: "n", Key: "k", Rule: limit.Rule{
			Algorithm: limit.SlidingLog, Limit: 5, Period: 2 * time.Second, MinInterval: 250 * time.Millisecond, Behavior: limit.CountRejected}}},
		{name: "sub-millisecond rounds up", in: limit.Check{Name: "n", Key: "k", Hits: 1, Rule: limit.Rule{
			Algorithm: limit.LeakyBucket, Limit: 5, Period: 1500 * time.Microsecond}},
			want: limit.Check{Name: "n", Key: "k", Hits: 1, Rule: limit.Rule{
				Algorithm: limit.LeakyBucket, Limit: 5, Period: 2 * time.Millisecond}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			want := tt.want
			if want == (limit.Check{}) {
				want = tt.in
			}
			var msg pb.RateLimitRequest
			checkToProto(&tt.in, &msg)
			got, err := checkFromProto(&msg)
			if err != nil || got != want {
				t.Fatalf("checkFromProto(checkToProto(%+v)) = %+v, %v, want %+v", tt.in, got, err, want)
			}
		})
	}
}

func TestResultToProto(t *testing.T) {
	t.Parallel()
	allowed := limit.Result{Decision: limit.Decision{Allowed: true, Remaining: 7, ResetAt: resetAt}, Owner: "node-a"}
	tests := []struct {
		name string
		in   limit.Result
		lim  int64
		want *pb.RateLimitResponse
	}{
		{name: "admitted, reset rounds up", in: allowed, lim: 10, want: &pb.RateLimitResponse{
			Status: pb.Status_UNDER_LIMIT, Limit: 10, Remaining: 7, ResetTimeMs: 1_700_000_000_124,
			Metadata: map[string]string{"owner": "node-a"}}},
		{name: "rejected, retry rounds up", in: limit.Result{Decision: limit.Decision{
			ResetAt: 5_000_000, RetryAfter: time.Nanosecond}, Owner: "b"}, lim: 3, want: &pb.RateLimitResponse{
			Status: pb.Status_OVER_LIMIT, Limit: 3, ResetTimeMs: 5, RetryAfterMs: 1, Metadata: map[string]string{"owner": "b"}}},
		{name: "never", in: limit.Result{Decision: limit.Decision{RetryAfter: limit.Never}}, lim: 3,
			want: &pb.RateLimitResponse{Status: pb.Status_OVER_LIMIT, Limit: 3, RetryAfterMs: -1}},
		{name: "shaping delay rounds up", in: limit.Result{Decision: limit.Decision{Allowed: true,
			Delay: 1500 * time.Microsecond}}, lim: 1, want: &pb.RateLimitResponse{Status: pb.Status_UNDER_LIMIT, Limit: 1, DelayMs: 2}},
		{name: "item error", in: limit.Failed(limit.Unavailable, errText("owner down")), lim: 4,
			want: &pb.RateLimitResponse{Status: pb.Status_OVER_LIMIT, Limit: 4, Error: "owner down",
				Metadata: map[string]string{"reason": "unavailable"}}},
		{name: "item error without reason", in: limit.Result{Error: "boom", Owner: "c"}, lim: 4,
			want: &pb.RateLimitResponse{Status: pb.Status_OVER_LIMIT, Limit: 4, Error: "boom",
				Metadata: map[string]string{"owner": "c", "reason": "internal"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := &pb.RateLimitResponse{Error: "stale", Metadata: map[string]string{"stale": "x"}}
			resultToProto(&tt.in, tt.lim, got, nil)
			if !proto.Equal(got, tt.want) {
				t.Fatalf("resultToProto(%+v, %d) = %v, want %v", tt.in, tt.lim, got, tt.want)
			}
		})
	}
}

func TestResultRoundTrip(t *testing.T) {
	t.Parallel()
	tests := []limit.Result{
		{Decision: limit.Decision{Allowed: true, Remaining: 9, ResetAt: 1_700_000_000_000_000_000}, Owner: "a"},
		{Decision: limit.Decision{Remaining: 0, ResetAt: 42_000_000, RetryAfter: 3 * time.Second}, Owner: "b"},
		{Decision: limit.Decision{RetryAfter: limit.Never}, Owner: "c"},
		{Decision: limit.Decision{Allowed: true, Delay: 20 * time.Millisecond}},
		limit.Failed(limit.Invalid, errText("limit must be > 0, got 0")),
		limit.Failed(limit.Closing, errText("closing")),
	}
	for _, in := range tests {
		var msg pb.RateLimitResponse
		resultToProto(&in, 1, &msg, nil)
		if got := resultFromProto(&msg, ""); got != in {
			t.Errorf("resultFromProto(resultToProto(%+v)) = %+v, want %+v", in, got, in)
		}
	}
}

func TestResultFromProtoSaturates(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   *pb.RateLimitResponse
		want limit.Result
	}{
		{in: &pb.RateLimitResponse{Status: pb.Status_OVER_LIMIT, ResetTimeMs: math.MaxInt64, RetryAfterMs: math.MaxInt64},
			want: limit.Result{Decision: limit.Decision{ResetAt: math.MaxInt64, RetryAfter: math.MaxInt64}}},
		{in: &pb.RateLimitResponse{Status: pb.Status_OVER_LIMIT, ResetTimeMs: math.MinInt64, RetryAfterMs: -7, DelayMs: -3},
			want: limit.Result{Decision: limit.Decision{ResetAt: math.MinInt64, RetryAfter: limit.Never}}},
		{in: &pb.RateLimitResponse{Error: "x", Metadata: map[string]string{"reason": "bogus"}},
			want: limit.Result{Error: "x", Reason: limit.Internal, Decision: limit.Decision{RetryAfter: 0}}},
	}
	for _, tt := range tests {
		if got := resultFromProto(tt.in, ""); got != tt.want {
			t.Errorf("resultFromProto(%v) = %+v, want %+v", tt.in, got, tt.want)
		}
	}
}

func TestCeilMs(t *testing.T) {
	t.Parallel()
	tests := []struct{ ns, want int64 }{
		{0, 0}, {1, 1}, {999_999, 1}, {1_000_000, 1}, {1_000_001, 2},
		{-1, 0}, {-1_000_000, -1}, {-1_500_000, -1},
		{math.MaxInt64, math.MaxInt64/nsPerMs + 1}, {math.MinInt64, math.MinInt64 / nsPerMs},
	}
	for _, tt := range tests {
		if got := ceilMs(tt.ns); got != tt.want {
			t.Errorf("ceilMs(%d) = %d, want %d", tt.ns, got, tt.want)
		}
	}
}

// The conversion casts between limit.Algorithm and pb.Algorithm: their
// numbering must agree.
func TestAlgorithmNumbering(t *testing.T) {
	t.Parallel()
	for _, a := range limit.Algorithms() {
		if got := pb.Algorithm(a).String(); got != a.String() {
			t.Errorf("pb.Algorithm(%d) = %q, want %q", a, got, a.String())
		}
	}
	if n := len(pb.Algorithm_name); n != len(limit.Algorithms()) || n != numAlgorithmLabels-1 {
		t.Errorf("pb has %d algorithms, limit %d, metrics %d", n, len(limit.Algorithms()), numAlgorithmLabels-1)
	}
	if int(limit.Reset) != int(pb.Behavior_RESET) || int(limit.CountRejected) != int(pb.Behavior_COUNT_REJECTED) {
		t.Errorf("behavior flags differ: limit %d,%d pb %d,%d", limit.Reset, limit.CountRejected, pb.Behavior_RESET, pb.Behavior_COUNT_REJECTED)
	}
	if n := len(limit.Reasons()); n != numReasonLabels {
		t.Errorf("limit has %d reasons, metrics %d", n, numReasonLabels)
	}
}

type errText string

func (e errText) Error() string { return string(e) }

func BenchmarkCheckFromProto(b *testing.B) {
	req := &pb.RateLimitRequest{Name: "api_per_minute", UniqueKey: "account:42", Hits: 1, Limit: 100,
		DurationMs: 60_000, Algorithm: pb.Algorithm_TOKEN_BUCKET}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := checkFromProto(req); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkResultToProto(b *testing.B) {
	r := limit.Result{Decision: limit.Decision{Allowed: true, Remaining: 7, ResetAt: resetAt}, Owner: "node-a"}
	var msg pb.RateLimitResponse
	var meta metaCache // one per batch: items of one owner share a map
	b.ReportAllocs()
	for b.Loop() {
		resultToProto(&r, 100, &msg, &meta)
	}
}

// The Peers response names its owner once; items decided by it carry no
// owner metadata and get it back on the client side.
func TestCompactOwnerRoundTrip(t *testing.T) {
	t.Parallel()
	in := []limit.Result{
		{Decision: limit.Decision{Allowed: true, Remaining: 1}, Owner: "a"},
		{Decision: limit.Decision{Remaining: 2}, Owner: "a"},
		limit.Failed(limit.Invalid, errText("bad")),
		{Decision: limit.Decision{Allowed: true}, Owner: "b"},
		{Error: "late", Reason: limit.Closing, Owner: "a"},
	}
	meta := metaCache{omitOwner: "a"}
	for i := range in {
		var msg pb.RateLimitResponse
		resultToProto(&in[i], 1, &msg, &meta)
		if in[i].Owner == "a" && in[i].Error == "" && msg.Metadata != nil {
			t.Errorf("resultToProto(%+v) metadata = %v, want none (owner named once)", in[i], msg.Metadata)
		}
		if got := resultFromProto(&msg, "a"); got != in[i] {
			t.Errorf("resultFromProto(resultToProto(%+v)) = %+v, want %+v", in[i], got, in[i])
		}
	}
}
