package wire

import (
	"math"
	"testing"
	"time"

	"github.com/shardlimiter/shardlimiter/limit"
	"github.com/shardlimiter/shardlimiter/transport/pb"
)

func TestRequestCheck(t *testing.T) {
	t.Parallel()
	full := func(edit func(r *Request)) Request {
		r := Request{Name: "api", Key: "account:42", Hits: 2, Limit: 100, DurationMs: 60_000,
			Algorithm: int32(limit.SlidingLog), MinIntervalMs: 10, Behavior: int32(limit.Reset | limit.CountRejected)}
		if edit != nil {
			edit(&r)
		}
		return r
	}
	maxMs := int64(limit.MaxPeriod / time.Millisecond)
	tests := []struct {
		name    string
		req     Request
		want    limit.Check
		wantErr string
	}{
		{name: "all fields", req: full(nil), want: limit.Check{Name: "api", Key: "account:42", Hits: 2,
			Rule: limit.Rule{Algorithm: limit.SlidingLog, Limit: 100, Period: time.Minute,
				MinInterval: 10 * time.Millisecond, Behavior: limit.Reset | limit.CountRejected}}},
		{name: "warmup and burst", req: full(func(r *Request) {
			r.Algorithm, r.MinIntervalMs, r.WarmupMs, r.Burst, r.Behavior = int32(limit.TokenBucket), 0, 5000, 7, 0
		}), want: limit.Check{Name: "api", Key: "account:42", Hits: 2,
			Rule: limit.Rule{Algorithm: limit.TokenBucket, Limit: 100, Period: time.Minute, Burst: 7, Warmup: 5 * time.Second}}},
		{name: "longest period", req: full(func(r *Request) { r.DurationMs = maxMs }),
			want: limit.Check{Name: "api", Key: "account:42", Hits: 2, Rule: limit.Rule{Algorithm: limit.SlidingLog,
				Limit: 100, Period: limit.MaxPeriod, MinInterval: 10 * time.Millisecond, Behavior: limit.Reset | limit.CountRejected}}},
		{name: "zero duration", req: full(func(r *Request) { r.DurationMs = 0 }),
			wantErr: "duration_ms must be > 0, got 0"},
		{name: "negative duration", req: full(func(r *Request) { r.DurationMs = -1 }),
			wantErr: "duration_ms must be > 0, got -1"},
		{name: "duration beyond MaxPeriod", req: full(func(r *Request) { r.DurationMs = maxMs + 1 }),
			wantErr: "duration_ms must be <= 31622400000, got 31622400001"},
		{name: "duration that would wrap", req: full(func(r *Request) { r.DurationMs = math.MaxInt64 }),
			wantErr: "duration_ms must be <= 31622400000, got 9223372036854775807"},
		{name: "negative min interval", req: full(func(r *Request) { r.MinIntervalMs = -5 }),
			wantErr: "min_interval_ms must be >= 0, got -5"},
		{name: "huge min interval", req: full(func(r *Request) { r.MinIntervalMs = math.MaxInt64 / 1000 }),
			wantErr: "min_interval_ms must be <= 31622400000, got 9223372036854775"},
		{name: "negative warmup", req: full(func(r *Request) { r.WarmupMs = math.MinInt64 }),
			wantErr: "warmup_ms must be >= 0, got -9223372036854775808"},
		{name: "huge warmup", req: full(func(r *Request) { r.WarmupMs = maxMs + 1 }),
			wantErr: "warmup_ms must be <= 31622400000, got 31622400001"},
		{name: "unknown algorithm", req: full(func(r *Request) { r.Algorithm = 5 }),
			wantErr: "unknown algorithm 5"},
		{name: "negative algorithm", req: full(func(r *Request) { r.Algorithm = -1 }),
			wantErr: "unknown algorithm -1"},
		{name: "unknown behavior", req: full(func(r *Request) { r.Behavior = 8 | int32(limit.Reset) }),
			wantErr: "unknown behavior flags 0x8"},
		{name: "negative behavior", req: full(func(r *Request) { r.Behavior = -1 }),
			wantErr: "unknown behavior flags 0xfffffff8"},
		{name: "calendar month", req: full(func(r *Request) {
			r.Algorithm, r.MinIntervalMs, r.Behavior, r.DurationMs, r.Calendar = int32(limit.FixedWindow), 0, 0, 31*24*3600*1000, int32(limit.CalendarMonth)
		}), want: limit.Check{Name: "api", Key: "account:42", Hits: 2,
			Rule: limit.Rule{Algorithm: limit.FixedWindow, Limit: 100, Period: 31 * 24 * time.Hour, Calendar: limit.CalendarMonth}}},
		{name: "unknown calendar", req: full(func(r *Request) { r.Calendar = 256 }), wantErr: "unknown calendar 256"},
		{name: "negative calendar", req: full(func(r *Request) { r.Calendar = -1 }), wantErr: "unknown calendar -1"},
		{name: "chained", req: full(func(r *Request) { r.Chained = true }), want: limit.Check{Name: "api", Key: "account:42", Hits: 2, Chained: true,
			Rule: limit.Rule{Algorithm: limit.SlidingLog, Limit: 100, Period: time.Minute,
				MinInterval: 10 * time.Millisecond, Behavior: limit.Reset | limit.CountRejected}}},
		{name: "rule by name: limit and duration 0", req: Request{Name: "api", Key: "k", Hits: 1},
			want: limit.Check{Name: "api", Key: "k", Hits: 1}},
		{name: "empty request", req: Request{}, want: limit.Check{}},
		{name: "limit 0 with a duration", req: full(func(r *Request) { r.Limit = 0 }),
			want: limit.Check{Name: "api", Key: "account:42", Hits: 2, Rule: limit.Rule{Algorithm: limit.SlidingLog, Period: time.Minute,
				MinInterval: 10 * time.Millisecond, Behavior: limit.Reset | limit.CountRejected}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := tt.req.Check()
			if tt.wantErr != "" {
				if err == nil || err.Error() != tt.wantErr {
					t.Fatalf("%+v.Check() = %+v, %v, want error %q", tt.req, got, err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("%+v.Check() = %+v, %v, want %+v", tt.req, got, err, tt.want)
			}
		})
	}
}

func TestCheckRoundTrip(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		in   limit.Check
		want limit.Check // after RequestOf then Check
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
			req := RequestOf(&tt.in)
			got, err := req.Check()
			if err != nil || got != want {
				t.Fatalf("RequestOf(%+v).Check() = %+v, %v, want %+v", tt.in, got, err, want)
			}
		})
	}
}

func TestResponseOf(t *testing.T) {
	t.Parallel()
	const resetAt = int64(1_700_000_000_123_456_789)
	allowed := limit.Result{Decision: limit.Decision{Allowed: true, Remaining: 7, ResetAt: resetAt}, Owner: "node-a"}
	tests := []struct {
		name      string
		in        limit.Result
		lim       int64
		omitOwner string
		want      Response
	}{
		{name: "admitted, reset rounds up", in: allowed, lim: 10,
			want: Response{Status: 0, Limit: 10, Remaining: 7, ResetTimeMs: 1_700_000_000_124, Owner: "node-a"}},
		{name: "owner named once for the batch", in: allowed, lim: 10, omitOwner: "node-a",
			want: Response{Status: 0, Limit: 10, Remaining: 7, ResetTimeMs: 1_700_000_000_124}},
		{name: "another owner than the batch's", in: allowed, lim: 10, omitOwner: "node-b",
			want: Response{Status: 0, Limit: 10, Remaining: 7, ResetTimeMs: 1_700_000_000_124, Owner: "node-a"}},
		{name: "rejected, retry rounds up", in: limit.Result{Decision: limit.Decision{
			ResetAt: 5_000_000, RetryAfter: time.Nanosecond}, Owner: "b"}, lim: 3,
			want: Response{Status: 1, Limit: 3, ResetTimeMs: 5, RetryAfterMs: 1, Owner: "b"}},
		{name: "never", in: limit.Result{Decision: limit.Decision{RetryAfter: limit.Never}}, lim: 3,
			want: Response{Status: 1, Limit: 3, RetryAfterMs: -1}},
		{name: "shaping delay rounds up", in: limit.Result{Decision: limit.Decision{Allowed: true,
			Delay: 1500 * time.Microsecond}}, lim: 1, want: Response{Status: 0, Limit: 1, DelayMs: 2}},
		{name: "negative durations", in: limit.Result{Decision: limit.Decision{RetryAfter: -time.Second,
			Delay: -time.Second}}, lim: 1, want: Response{Status: 1, Limit: 1}},
		{name: "item error", in: limit.Failed(limit.Unavailable, errText("owner down")), lim: 4,
			want: Response{Status: 1, Limit: 4, Error: "owner down", Reason: limit.Unavailable}},
		{name: "item error without reason keeps its owner", in: limit.Result{Error: "boom", Owner: "c"}, lim: 4,
			omitOwner: "c", want: Response{Status: 1, Limit: 4, Error: "boom", Owner: "c", Reason: limit.Internal}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := ResponseOf(&tt.in, tt.lim, tt.omitOwner); got != tt.want {
				t.Fatalf("ResponseOf(%+v, %d, %q) = %+v, want %+v", tt.in, tt.lim, tt.omitOwner, got, tt.want)
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
		resp := ResponseOf(&in, 1, "")
		if got := resp.Result(""); got != in {
			t.Errorf("ResponseOf(%+v).Result() = %+v, want %+v", in, got, in)
		}
	}
}

func TestResultSaturates(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   Response
		want limit.Result
	}{
		{in: Response{Status: 1, ResetTimeMs: math.MaxInt64, RetryAfterMs: math.MaxInt64},
			want: limit.Result{Decision: limit.Decision{ResetAt: math.MaxInt64, RetryAfter: math.MaxInt64}, Owner: "o"}},
		{in: Response{Status: 1, ResetTimeMs: math.MinInt64, RetryAfterMs: -7, DelayMs: -3},
			want: limit.Result{Decision: limit.Decision{ResetAt: math.MinInt64, RetryAfter: limit.Never}, Owner: "o"}},
		{in: Response{Error: "x"}, want: limit.Result{Error: "x", Reason: limit.Internal}},
		{in: Response{Status: 2}, want: limit.Result{Decision: limit.Decision{RetryAfter: 0}, Owner: "o"}},
	}
	for _, tt := range tests {
		if got := tt.in.Result("o"); got != tt.want {
			t.Errorf("%+v.Result(%q) = %+v, want %+v", tt.in, "o", got, tt.want)
		}
	}
}

func TestParseReason(t *testing.T) {
	t.Parallel()
	for _, r := range limit.Reasons() {
		want := r
		if r == limit.OK {
			want = limit.Internal // an item that failed did not fail for no reason
		}
		if got := parseReason([]byte(r.String())); got != want {
			t.Errorf("parseReason(%q) = %v, want %v", r.String(), got, want)
		}
	}
	if got := parseReason([]byte("bogus")); got != limit.Internal {
		t.Errorf("parseReason(%q) = %v, want %v", "bogus", got, limit.Internal)
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

// The conversions carry limit's enums as the wire's numbers: the two
// numberings must agree.
func TestEnumNumbering(t *testing.T) {
	t.Parallel()
	for _, a := range limit.Algorithms() {
		if got := pb.Algorithm(a).String(); got != a.String() {
			t.Errorf("pb.Algorithm(%d) = %q, want %q", a, got, a.String())
		}
	}
	if n := len(pb.Algorithm_name); n != len(limit.Algorithms()) || n != int(limit.SlidingLog)+1 {
		t.Errorf("pb has %d algorithms, limit %d, the last one is %d", n, len(limit.Algorithms()), limit.SlidingLog)
	}
	if int(limit.Reset) != int(pb.Behavior_RESET) || int(limit.CountRejected) != int(pb.Behavior_COUNT_REJECTED) {
		t.Errorf("behavior flags differ: limit %d,%d pb %d,%d", limit.Reset, limit.CountRejected, pb.Behavior_RESET, pb.Behavior_COUNT_REJECTED)
	}
	if statusUnderLimit != int32(pb.Status_UNDER_LIMIT) || statusOverLimit != int32(pb.Status_OVER_LIMIT) {
		t.Errorf("status numbers differ from pb's")
	}
}

type errText string

func (e errText) Error() string { return string(e) }

func BenchmarkRequestCheck(b *testing.B) {
	req := Request{Name: "api_per_minute", Key: "account:42", Hits: 1, Limit: 100,
		DurationMs: 60_000, Algorithm: int32(limit.TokenBucket)}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := req.Check(); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkResponseOf(b *testing.B) {
	r := limit.Result{Decision: limit.Decision{Allowed: true, Remaining: 7, ResetAt: 1_700_000_000_123_456_789}, Owner: "node-a"}
	var sink Response
	b.ReportAllocs()
	for b.Loop() {
		sink = ResponseOf(&r, 100, "")
	}
	_ = sink
}
