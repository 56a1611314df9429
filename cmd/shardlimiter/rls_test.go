package main

import (
	"context"
	"io"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	ratelimitpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typepb "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/shardlimiter/shardlimiter/limit"
)

// rlsRules is envoyproxy/ratelimit's format with our extensions. Counting
// limits use SLIDING_LOG so that no window boundary falls inside a test.
const rlsRules = `
domain: rl
descriptors:
  - key: source_cluster
    value: proxy
    descriptors:
      - key: destination_cluster
        value: bar
        rate_limit: {unit: hour, requests_per_unit: 3, algorithm: sliding_log}
      - key: destination_cluster
        value: mock
        rate_limit: {unlimited: true}
  - key: path
    value: /api/*
    rate_limit: {unit: hour, requests_per_unit: 2, algorithm: sliding_log}
  - key: shadow
    shadow_mode: true
    rate_limit: {unit: hour, requests_per_unit: 1, algorithm: sliding_log}
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 2, name: user_limit, algorithm: sliding_log}
  - key: vip
    rate_limit: {unit: hour, requests_per_unit: 100, algorithm: sliding_log, replaces: [{name: user_limit}]}
  - key: tiered
    rate_limits:
      - {unit: hour, requests_per_unit: 2, algorithm: sliding_log}
      - {unit: day, requests_per_unit: 3, algorithm: sliding_log}
  - key: hits
    rate_limit: {unit: hour, requests_per_unit: 10, algorithm: sliding_log}
`

// desc builds a descriptor from key, value pairs.
func desc(kv ...string) *ratelimitpb.RateLimitDescriptor {
	d := &ratelimitpb.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &ratelimitpb.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

func writeFile(t *testing.T, path, data string) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil { // atomic, as a ConfigMap swap
		t.Fatal(err)
	}
}

// rlsClient dials p's client port with go-control-plane's generated client.
func rlsClient(t *testing.T, p *proc) rlspb.RateLimitServiceClient {
	t.Helper()
	cc, err := grpc.NewClient(p.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return rlspb.NewRateLimitServiceClient(cc)
}

// startRLSNode starts one binary on host with the rules file and flags.
func startRLSNode(t *testing.T, host, rulesFile string, extra ...string) *proc {
	t.Helper()
	bin := buildBinary(t)
	return startProc(t, bin, host, freeGossipPort(t, host), "", append([]string{"--config", rulesFile}, extra...)...)
}

// codes returns the overall code and each descriptor's code.
func codesOf(r *rlspb.RateLimitResponse) []rlspb.RateLimitResponse_Code {
	out := []rlspb.RateLimitResponse_Code{r.GetOverallCode()}
	for _, s := range r.GetStatuses() {
		out = append(out, s.GetCode())
	}
	return out
}

const (
	ok   = rlspb.RateLimitResponse_OK
	over = rlspb.RateLimitResponse_OVER_LIMIT
)

// TestRLSRealBinary drives the binary's RateLimitService with
// go-control-plane's client through the semantics of Envoy and
// envoyproxy/ratelimit, one rule of rlsRules per subtest.
func TestRLSRealBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a real process")
	}
	t.Parallel()
	rulesFile := filepath.Join(t.TempDir(), "rules.yaml")
	writeFile(t, rulesFile, rlsRules)
	p := startRLSNode(t, "127.0.0.40", rulesFile, "--rls-headers")
	c := rlsClient(t, p)
	ctx := context.Background()
	call := func(t *testing.T, req *rlspb.RateLimitRequest) *rlspb.RateLimitResponse {
		t.Helper()
		if req.Domain == "" {
			req.Domain = "rl"
		}
		resp, err := c.ShouldRateLimit(ctx, req)
		if err != nil {
			t.Fatalf("ShouldRateLimit(%v) = %v", req, err)
		}
		if len(resp.Statuses) != len(req.Descriptors) {
			t.Fatalf("%d statuses for %d descriptors", len(resp.Statuses), len(req.Descriptors))
		}
		return resp
	}
	expect := func(t *testing.T, req *rlspb.RateLimitRequest, want ...rlspb.RateLimitResponse_Code) *rlspb.RateLimitResponse {
		t.Helper()
		resp := call(t, req)
		if got := codesOf(resp); !equalCodes(got, want) {
			t.Fatalf("ShouldRateLimit(%v) codes = %v, want %v (overall first)", req.Descriptors, got, want)
		}
		return resp
	}
	one := func(d *ratelimitpb.RateLimitDescriptor) *rlspb.RateLimitRequest {
		return &rlspb.RateLimitRequest{Descriptors: []*ratelimitpb.RateLimitDescriptor{d}}
	}

	t.Run("nested", func(t *testing.T) {
		d := desc("source_cluster", "proxy", "destination_cluster", "bar")
		for i := range 3 {
			r := expect(t, one(d), ok, ok)
			if s := r.Statuses[0]; s.CurrentLimit.GetRequestsPerUnit() != 3 || s.CurrentLimit.GetUnit() != rlspb.RateLimitResponse_RateLimit_HOUR ||
				s.LimitRemaining != uint32(2-i) || s.DurationUntilReset.AsDuration() <= 0 {
				t.Fatalf("take %d status = %v", i, s)
			}
		}
		r := expect(t, one(d), over, over)
		if len(r.ResponseHeadersToAdd) != 2 || !strings.HasSuffix(headerOf(r.ResponseHeadersToAdd, "RateLimit"), ";r=0;t=3600") ||
			headerOf(r.ResponseHeadersToAdd, "RateLimit-Policy") == "" || !strings.HasSuffix(headerOf(r.ResponseHeadersToAdd, "RateLimit-Policy"), ";q=3;w=3600") {
			t.Errorf("headers = %v", r.ResponseHeadersToAdd)
		}
	})
	t.Run("wildcard values count apart", func(t *testing.T) {
		for _, path := range []string{"/api/users", "/api/orders"} {
			expect(t, one(desc("path", path)), ok, ok)
			expect(t, one(desc("path", path)), ok, ok)
			expect(t, one(desc("path", path)), over, over)
		}
		expect(t, one(desc("path", "/other")), ok, ok) // no rule
	})
	t.Run("unlimited", func(t *testing.T) {
		for range 5 {
			r := expect(t, one(desc("source_cluster", "proxy", "destination_cluster", "mock")), ok, ok)
			if r.Statuses[0].LimitRemaining != math.MaxUint32 || r.Statuses[0].CurrentLimit != nil {
				t.Fatalf("unlimited status = %v", r.Statuses[0])
			}
		}
	})
	t.Run("shadow mode", func(t *testing.T) {
		expect(t, one(desc("shadow", "s1")), ok, ok)
		r := expect(t, one(desc("shadow", "s1")), ok, ok)
		if r.Statuses[0].LimitRemaining != 0 {
			t.Errorf("shadowed status = %v, want remaining 0", r.Statuses[0])
		}
		if m := metric(http.DefaultClient, "http://"+p.http, "shardlimiter_rls_descriptors_total", `result="shadow_over_limit"`); m < 1 {
			t.Errorf("shadow_over_limit metric = %v, want >= 1", m)
		}
	})
	t.Run("replaces", func(t *testing.T) {
		both := &rlspb.RateLimitRequest{Descriptors: []*ratelimitpb.RateLimitDescriptor{desc("user", "u1"), desc("vip", "v1")}}
		for range 4 {
			r := expect(t, both, ok, ok, ok)
			if r.Statuses[0].CurrentLimit != nil {
				t.Fatalf("replaced user_limit still reported: %v", r.Statuses[0])
			}
		}
		expect(t, one(desc("user", "u1")), ok, ok)
		expect(t, one(desc("user", "u1")), ok, ok)
		expect(t, one(desc("user", "u1")), over, over)
	})
	t.Run("hits_addend", func(t *testing.T) {
		d := func(h *wrapperspb.UInt64Value) *ratelimitpb.RateLimitDescriptor {
			x := desc("hits", "h1")
			x.HitsAddend = h
			return x
		}
		remaining := func(req *rlspb.RateLimitRequest, want uint32, code rlspb.RateLimitResponse_Code) {
			t.Helper()
			r := expect(t, req, code, code)
			if r.Statuses[0].LimitRemaining != want {
				t.Fatalf("remaining = %d, want %d", r.Statuses[0].LimitRemaining, want)
			}
		}
		remaining(one(d(nil)), 9, ok)                                                                                                      // request 0 means 1
		remaining(&rlspb.RateLimitRequest{HitsAddend: 3, Descriptors: []*ratelimitpb.RateLimitDescriptor{d(nil)}}, 6, ok)                  // request-level
		remaining(&rlspb.RateLimitRequest{HitsAddend: 3, Descriptors: []*ratelimitpb.RateLimitDescriptor{d(wrapperspb.UInt64(0))}}, 6, ok) // set to 0: check only
		remaining(&rlspb.RateLimitRequest{HitsAddend: 5, Descriptors: []*ratelimitpb.RateLimitDescriptor{d(wrapperspb.UInt64(2))}}, 4, ok) // descriptor wins
		// Refused hits count too (6 + 5 = 11 of 10): nothing remains, and
		// a check of 0 hits is refused while the count is over.
		remaining(one(d(wrapperspb.UInt64(5))), 0, over)
		remaining(one(d(wrapperspb.UInt64(0))), 0, over)
	})
	t.Run("limit override", func(t *testing.T) {
		d := desc("user", "override")
		d.Limit = &ratelimitpb.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 4, Unit: typepb.RateLimitUnit_DAY}
		for range 4 {
			r := expect(t, one(d), ok, ok)
			if l := r.Statuses[0].CurrentLimit; l.GetRequestsPerUnit() != 4 || l.GetUnit() != rlspb.RateLimitResponse_RateLimit_DAY {
				t.Fatalf("override current_limit = %v", l)
			}
		}
		expect(t, one(d), over, over)
		expect(t, one(desc("user", "override")), ok, ok) // the configured rule, its own counter
	})
	t.Run("mixed descriptors", func(t *testing.T) {
		req := &rlspb.RateLimitRequest{Descriptors: []*ratelimitpb.RateLimitDescriptor{
			desc("path", "/api/mixed"), desc("source_cluster", "proxy", "destination_cluster", "mock"), desc("nothing", "here")}}
		expect(t, req, ok, ok, ok, ok)
		expect(t, req, ok, ok, ok, ok)
		r := expect(t, req, over, over, ok, ok)
		if r.Statuses[1].LimitRemaining != math.MaxUint32 || r.Statuses[2].CurrentLimit != nil {
			t.Errorf("statuses = %v", r.Statuses)
		}
	})
	t.Run("rate_limits count every hit in every limit", func(t *testing.T) {
		// 2 an hour and 3 a day. Two admitted; the third is refused by the
		// hour and counted in both (the day is then at its limit, not over
		// it); the fourth is refused by both, and a check of 0 hits too.
		d := desc("tiered", "t1")
		expect(t, one(d), ok, ok)
		r := expect(t, one(d), ok, ok)
		if s := r.Statuses[0]; s.LimitRemaining != 0 || s.CurrentLimit.GetRequestsPerUnit() != 2 {
			t.Fatalf("second call status = %v, want the hour's limit with 0 remaining", s)
		}
		r = expect(t, one(d), over, over)
		if s := r.Statuses[0]; s.CurrentLimit.GetRequestsPerUnit() != 2 {
			t.Fatalf("third call status = %v, want the hour's refusal", s)
		}
		expect(t, one(d), over, over)
		d.HitsAddend = wrapperspb.UInt64(0)
		expect(t, one(d), over, over)
	})
	t.Run("unknown domain", func(t *testing.T) {
		r := expect(t, &rlspb.RateLimitRequest{Domain: "nope", Descriptors: []*ratelimitpb.RateLimitDescriptor{desc("path", "/api/x")}}, ok, ok)
		if r.Statuses[0].CurrentLimit != nil {
			t.Errorf("status = %v", r.Statuses[0])
		}
		if m := metric(http.DefaultClient, "http://"+p.http, "shardlimiter_rls_descriptors_total", `result="no_rule"`); m < 1 {
			t.Errorf("no_rule metric = %v", m)
		}
		if _, err := c.ShouldRateLimit(ctx, &rlspb.RateLimitRequest{Descriptors: []*ratelimitpb.RateLimitDescriptor{desc("a", "b")}}); status.Code(err) != codes.InvalidArgument {
			t.Errorf("empty domain: %v, want InvalidArgument", err)
		}
	})
	t.Run("json", func(t *testing.T) {
		body := `{"domain":"rl","descriptors":[{"entries":[{"key":"path","value":"/api/json"}]}]}`
		for i, want := range []int{200, 200, 429} {
			resp, err := http.Post("http://"+p.http+"/json", "application/json", strings.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != want || !strings.Contains(string(b), "overallCode") {
				t.Fatalf("POST /json %d = %d %s, want %d", i, resp.StatusCode, b, want)
			}
		}
		resp, err := http.Get("http://" + p.http + "/v1/config")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !strings.Contains(string(b), "user_limit") {
			t.Errorf("GET /v1/config = %d %s", resp.StatusCode, b)
		}
	})
	t.Run("native API takes rules by name", func(t *testing.T) {
		api := dialAPI(t, p.grpc)
		for i, want := range []bool{true, true, false} {
			res, err := api.GetRateLimits(ctx, []limit.Check{{Name: "user_limit", Key: "native", Hits: 1}})
			if err != nil || res[0].Error != "" || res[0].Allowed != want {
				t.Fatalf("take %d by name = %+v %v, want allowed %v", i, res, err, want)
			}
		}
		res, err := api.GetRateLimits(ctx, []limit.Check{{Name: "no_such_rule", Key: "native", Hits: 1}})
		if err != nil || !strings.Contains(res[0].Error, "no rule is named") {
			t.Errorf("unknown rule = %+v %v, want an item error", res, err)
		}
	})
}

func equalCodes(a, b []rlspb.RateLimitResponse_Code) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func headerOf(hs []*corepb.HeaderValue, key string) string {
	for _, h := range hs {
		if h.Key == key {
			return h.Value
		}
	}
	return ""
}
