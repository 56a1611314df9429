package rls

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	ratelimitpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/shardlimiter/shardlimiter/limit"
	"github.com/shardlimiter/shardlimiter/transport"
)

// refusedAt is a refusal with remaining left, whose key resets after d.
func refusedAt(remaining int64, d time.Duration) limit.Result {
	return limit.Result{Decision: limit.Decision{Remaining: remaining, ResetAt: t0.Add(d).UnixNano(), RetryAfter: d}}
}

// statusText is a descriptor status as the answer table writes it: code,
// current limit name and requests per unit, remaining, duration until reset.
func statusText(s *rlspb.RateLimitResponse_DescriptorStatus) string {
	return fmt.Sprintf("%v %s/%d/%v r=%d reset=%v", s.GetCode(), s.GetCurrentLimit().GetName(),
		s.GetCurrentLimit().GetRequestsPerUnit(), s.GetCurrentLimit().GetUnit(), s.GetLimitRemaining(), s.GetDurationUntilReset().AsDuration())
}

// TestAnswer: overall code and one status per descriptor, in order.
func TestAnswer(t *testing.T) {
	t.Parallel()
	const maxU32 = math.MaxUint32
	for _, tc := range []struct {
		name    string
		answers map[string]limit.Result
		shadow  bool // node-wide
		descs   []*ratelimitpb.RateLimitDescriptor
		overall rlspb.RateLimitResponse_Code
		want    []string
	}{
		{"admitted", nil, false, []*ratelimitpb.RateLimitDescriptor{entries("k", "a")},
			rlspb.RateLimitResponse_OK, []string{"OK per_min/10/MINUTE r=9 reset=30s"}},
		{"one over makes the call over", map[string]limit.Result{"per_min": refusedAt(0, 12*time.Second)}, false,
			[]*ratelimitpb.RateLimitDescriptor{entries("k", "a"), entries("free", "a"), entries("nope", "x")},
			rlspb.RateLimitResponse_OVER_LIMIT, []string{
				"OVER_LIMIT per_min/10/MINUTE r=0 reset=12s",
				fmt.Sprintf("OK /0/UNKNOWN r=%d reset=0s", uint32(maxU32)),
				"OK /0/UNKNOWN r=0 reset=0s"}},
		{"over the limit, nothing remains", map[string]limit.Result{"per_min": refusedAt(3, 12*time.Second)}, false,
			[]*ratelimitpb.RateLimitDescriptor{entries("k", "a")},
			rlspb.RateLimitResponse_OVER_LIMIT, []string{"OVER_LIMIT per_min/10/MINUTE r=0 reset=12s"}},
		{"a generated name is not reported", nil, false, []*ratelimitpb.RateLimitDescriptor{entries("anon", "a")},
			rlspb.RateLimitResponse_OK, []string{"OK /4/HOUR r=3 reset=30s"}},
		{"shadow rule answers OK", map[string]limit.Result{"shadowed": refusedAt(0, time.Second)}, false,
			[]*ratelimitpb.RateLimitDescriptor{entries("shadow", "a")},
			rlspb.RateLimitResponse_OK, []string{"OK shadowed/1/SECOND r=0 reset=1s"}},
		{"node shadow answers OK", map[string]limit.Result{"per_min": refusedAt(0, 12*time.Second)}, true,
			[]*ratelimitpb.RateLimitDescriptor{entries("k", "a")},
			rlspb.RateLimitResponse_OK, []string{"OVER_LIMIT per_min/10/MINUTE r=0 reset=12s"}},
		{"a refused group reports the limit that refused", map[string]limit.Result{
			"tier_sec": refusedAt(0, time.Second), "tier_hour": refusedAt(50, time.Hour)}, false,
			[]*ratelimitpb.RateLimitDescriptor{entries("tiered", "a")},
			rlspb.RateLimitResponse_OVER_LIMIT, []string{"OVER_LIMIT tier_sec/5/SECOND r=0 reset=1s"}},
		{"an admitted group reports the least remaining", nil, false,
			[]*ratelimitpb.RateLimitDescriptor{entries("tiered", "a")},
			rlspb.RateLimitResponse_OK, []string{"OK tier_sec/5/SECOND r=4 reset=30s"}},
		{"requests_per_unit 0 blocks", nil, false, []*ratelimitpb.RateLimitDescriptor{entries("blocked", "a")},
			rlspb.RateLimitResponse_OVER_LIMIT, []string{"OVER_LIMIT none/0/MINUTE r=0 reset=1m0s"}},
		{"a replaced limit answers OK", nil, false, []*ratelimitpb.RateLimitDescriptor{entries("k", "a"), entries("new", "a")},
			rlspb.RateLimitResponse_OK, []string{"OK /0/UNKNOWN r=0 reset=0s", "OK new_min/3/MINUTE r=2 reset=30s"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newTestService(t, &fakeChecker{answers: tc.answers}, false)
			s.cfg.Shadow = tc.shadow
			resp, err := s.ShouldRateLimit(context.Background(), &rlspb.RateLimitRequest{Domain: "d", Descriptors: tc.descs})
			if err != nil {
				t.Fatal(err)
			}
			if resp.OverallCode != tc.overall {
				t.Errorf("overall_code = %v, want %v", resp.OverallCode, tc.overall)
			}
			var got []string
			for _, st := range resp.Statuses {
				got = append(got, statusText(st))
			}
			if strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
				t.Errorf("statuses:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
			}
			if len(resp.ResponseHeadersToAdd) != 0 {
				t.Errorf("headers without Config.Headers: %v", resp.ResponseHeadersToAdd)
			}
		})
	}
}

// TestAnswerErrors: the code a failed call answers with.
func TestAnswerErrors(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	req := &rlspb.RateLimitRequest{Domain: "d", Descriptors: []*ratelimitpb.RateLimitDescriptor{entries("k", "a")}}
	for _, tc := range []struct {
		name string
		f    *fakeChecker
		req  *rlspb.RateLimitRequest
		code codes.Code
	}{
		{"no domain", &fakeChecker{}, &rlspb.RateLimitRequest{Descriptors: req.Descriptors}, codes.InvalidArgument},
		{"no descriptor", &fakeChecker{}, &rlspb.RateLimitRequest{Domain: "d"}, codes.InvalidArgument},
		{"invalid check", &fakeChecker{answers: map[string]limit.Result{"per_min": limit.Failed(limit.Invalid, errors.New("bad"))}}, req, codes.InvalidArgument},
		{"owner unreachable", &fakeChecker{answers: map[string]limit.Result{"per_min": limit.Failed(limit.Unavailable, errors.New("down"))}}, req, codes.Unavailable},
		{"shutting down", &fakeChecker{err: transport.ErrShuttingDown}, req, codes.Unavailable},
		{"shed", &fakeChecker{err: fmt.Errorf("full: %w", transport.ErrOverloaded)}, req, codes.ResourceExhausted},
	} {
		_, err := newTestService(t, tc.f, false).ShouldRateLimit(ctx, tc.req)
		if status.Code(err) != tc.code {
			t.Errorf("%s: ShouldRateLimit = %v, want %v", tc.name, err, tc.code)
		}
		if tc.code == codes.ResourceExhausted && !transport.IsShed(err) {
			t.Errorf("%s: %v carries no retry delay", tc.name, err)
		}
	}
}

// sfItem is one Structured Field list item of a header: its string value
// and integer parameters.
type sfItem struct {
	value  string
	params map[string]int64
}

// parseSFItem parses `"name";k=1;k2=2` strictly: an sf-string (with \" and
// \\ escapes) and integer parameters with lower-case keys.
func parseSFItem(s string) (sfItem, error) {
	it := sfItem{params: map[string]int64{}}
	if !strings.HasPrefix(s, `"`) {
		return it, fmt.Errorf("%q: no sf-string", s)
	}
	var b strings.Builder
	i := 1
	for ; i < len(s) && s[i] != '"'; i++ {
		if s[i] == '\\' {
			i++
			if i == len(s) || (s[i] != '"' && s[i] != '\\') {
				return it, fmt.Errorf("%q: bad escape", s)
			}
		} else if s[i] < 0x20 || s[i] > 0x7e {
			return it, fmt.Errorf("%q: byte %#x in an sf-string", s, s[i])
		}
		b.WriteByte(s[i])
	}
	if i == len(s) {
		return it, fmt.Errorf("%q: unterminated sf-string", s)
	}
	it.value = b.String()
	for _, p := range strings.Split(s[i+1:], ";")[1:] {
		k, v, ok := strings.Cut(p, "=")
		n, err := strconv.ParseInt(v, 10, 64)
		if !ok || k == "" || strings.ToLower(k) != k || err != nil || n < 0 {
			return it, fmt.Errorf("%q: bad parameter %q", s, p)
		}
		it.params[k] = n
	}
	return it, nil
}

// TestHeaders: with Config.Headers, the fields of the descriptor closest to
// its limit, parsed back as draft-ietf-httpapi-ratelimit-headers-11 lists.
func TestHeaders(t *testing.T) {
	t.Parallel()
	f := &fakeChecker{answers: map[string]limit.Result{"per_min": refusedAt(0, 1500*time.Millisecond)}}
	s := newTestService(t, f, true)
	for _, tc := range []struct {
		descs          []*ratelimitpb.RateLimitDescriptor
		name           string
		q, w, r, reset int64
	}{
		// tier_sec has 4 left, the hour 99 (unlimited has no fields): the second speaks.
		{[]*ratelimitpb.RateLimitDescriptor{entries("free", "a"), entries("tiered", "a")}, "tier_sec", 5, 1, 4, 30},
		// an over-limit descriptor first, whatever the others have left; t rounds up.
		{[]*ratelimitpb.RateLimitDescriptor{entries("tiered", "a"), entries("k", "a")}, "per_min", 10, 60, 0, 2},
	} {
		resp, err := s.ShouldRateLimit(context.Background(), &rlspb.RateLimitRequest{Domain: "d", Descriptors: tc.descs})
		if err != nil {
			t.Fatal(err)
		}
		h := map[string]string{}
		for _, hv := range resp.ResponseHeadersToAdd {
			h[hv.Key] = hv.Value
		}
		policy, err1 := parseSFItem(h["RateLimit-Policy"])
		state, err2 := parseSFItem(h["RateLimit"])
		if err := errors.Join(err1, err2); err != nil || len(h) != 2 {
			t.Fatalf("headers %v: %v", h, err)
		}
		if policy.value != tc.name || state.value != tc.name {
			t.Errorf("headers %v: policy %q, want %q in both", h, policy.value, tc.name)
		}
		wantP, wantS := map[string]int64{"q": tc.q, "w": tc.w}, map[string]int64{"r": tc.r, "t": tc.reset}
		if fmt.Sprint(policy.params) != fmt.Sprint(wantP) || fmt.Sprint(state.params) != fmt.Sprint(wantS) {
			t.Errorf("headers %v: params %v and %v, want %v and %v", h, policy.params, state.params, wantP, wantS)
		}
	}
	if got := sfString("a\"b\\c\x01é"); got != `"a\"b\\c___"` {
		t.Errorf("sfString = %s, want quotes and backslashes escaped, other bytes _", got)
	}
	if _, err := parseSFItem(sfString("a\"b\\c\x01")); err != nil {
		t.Errorf("sfString does not parse back: %v", err)
	}
}
