package rls

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	ratelimitpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/shardlimiter/shardlimiter/limit"
	"github.com/shardlimiter/shardlimiter/rules"
)

// quotaRules are envoyproxy/ratelimit's multi-service token quota rules:
// each service a quota_mode descriptor whose metadata names it.
const quotaRules = `
domain: rl
descriptors:
  - key: service
    value: service_1
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
    metadata:
      service_with_quota: {name: service_1}
  - key: service
    value: service_2
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 2}
    metadata:
      service_with_quota: {name: service_2, zone: b}
`

func quotaService(t *testing.T, f *fakeChecker, cfg Config) *Service {
	t.Helper()
	set, err := rules.Parse("quota.yaml", []byte(quotaRules))
	if err != nil {
		t.Fatal(err)
	}
	cfg.Checker, cfg.Rules, cfg.Now = f, rules.NewStore(set), func() time.Time { return t0 }
	return New(cfg)
}

// TestDynamicMetadata: the structure and field names of
// envoyproxy/ratelimit's RESPONSE_DYNAMIC_METADATA, with the metadata of
// the descriptors that passed merged, the first one winning.
func TestDynamicMetadata(t *testing.T) {
	t.Parallel()
	withHits := func(d *ratelimitpb.RateLimitDescriptor, h uint64) *ratelimitpb.RateLimitDescriptor {
		d.HitsAddend = wrapperspb.UInt64(h)
		return d
	}
	req := func() *rlspb.RateLimitRequest {
		return &rlspb.RateLimitRequest{Domain: "rl", HitsAddend: 3, Descriptors: []*ratelimitpb.RateLimitDescriptor{
			withHits(entries("service", "service_1"), 0), withHits(entries("service", "service_2"), 0)}}
	}
	for _, tc := range []struct {
		name    string
		answers map[string]limit.Result
		want    string
	}{
		{"both pass: the first service wins, structs merge", nil,
			`{"descriptors":[{"entries":["service=service_1"],"hitsAddend":0},{"entries":["service=service_2"],"hitsAddend":0}],` +
				`"domain":"rl","hitsAddend":3,"metadata":{"service_with_quota":{"name":"service_1","zone":"b"}}}`},
		{"service_1 over: service_2's metadata", map[string]limit.Result{"rl.service_service_1": refusedAt(0, time.Minute)},
			`{"descriptors":[{"entries":["service=service_1"],"hitsAddend":0},{"entries":["service=service_2"],"hitsAddend":0}],` +
				`"domain":"rl","hitsAddend":3,"metadata":{"service_with_quota":{"name":"service_2","zone":"b"}}}`},
		{"both over: no metadata", map[string]limit.Result{"rl.service_service_1": refusedAt(0, time.Minute), "rl.service_service_2": refusedAt(0, time.Minute)},
			`{"descriptors":[{"entries":["service=service_1"],"hitsAddend":0},{"entries":["service=service_2"],"hitsAddend":0}],` +
				`"domain":"rl","hitsAddend":3}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := quotaService(t, &fakeChecker{answers: tc.answers}, Config{DynamicMetadata: true})
			resp, err := s.ShouldRateLimit(context.Background(), req())
			if err != nil {
				t.Fatal(err)
			}
			got, err := protojson.MarshalOptions{}.Marshal(resp.DynamicMetadata)
			if err != nil {
				t.Fatal(err)
			}
			if compactJSON(t, got) != compactJSON(t, []byte(tc.want)) {
				t.Errorf("dynamic_metadata = %s\nwant %s", got, tc.want)
			}
		})
	}
	s := quotaService(t, &fakeChecker{}, Config{})
	if resp, err := s.ShouldRateLimit(context.Background(), req()); err != nil || resp.DynamicMetadata != nil {
		t.Errorf("without DynamicMetadata: %v, %v; want no dynamic_metadata", resp.GetDynamicMetadata(), err)
	}
}

// TestRateLimitHeaders: envoyproxy/ratelimit's three fields, for the
// descriptor with the least remaining unless one outside quota mode is
// over; their names can be set.
func TestRateLimitHeaders(t *testing.T) {
	t.Parallel()
	f := &fakeChecker{answers: map[string]limit.Result{"per_min": refusedAt(2, 1500*time.Millisecond)}}
	set, err := rules.Parse("rules.yaml", []byte(testRules))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		names HeaderNames
		descs []*ratelimitpb.RateLimitDescriptor
		want  map[string]string
	}{
		// tier_sec has 4 left of 5 (reset 30 s), the hour 99; unlimited has no limit.
		{HeaderNames{}, []*ratelimitpb.RateLimitDescriptor{entries("free", "a"), entries("tiered", "a")},
			map[string]string{"RateLimit-Limit": "5", "RateLimit-Remaining": "4", "RateLimit-Reset": "30"}},
		// over the limit speaks, with 0 remaining; the reset rounds up.
		{HeaderNames{Limit: "X-Limit", Remaining: "X-Left", Reset: "X-Reset"},
			[]*ratelimitpb.RateLimitDescriptor{entries("k", "a"), entries("tiered", "a")},
			map[string]string{"X-Limit": "10", "X-Left": "0", "X-Reset": "2"}},
	} {
		s := New(Config{Checker: f, Rules: rules.NewStore(set), Headers: true, HeadersFormat: HeadersRateLimit,
			HeaderNames: tc.names, Now: func() time.Time { return t0 }})
		resp, err := s.ShouldRateLimit(context.Background(), &rlspb.RateLimitRequest{Domain: "d", Descriptors: tc.descs})
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]string{}
		for _, h := range resp.ResponseHeadersToAdd {
			got[h.Key] = h.Value
		}
		if len(got) != len(tc.want) {
			t.Errorf("headers %v, want %v", got, tc.want)
		}
		for k, v := range tc.want {
			if got[k] != v {
				t.Errorf("headers %v, want %v", got, tc.want)
				break
			}
		}
	}
	for in, want := range map[string]HeadersFormat{"ietf": HeadersIETF, "RateLimit": HeadersRateLimit} {
		if got, err := ParseHeadersFormat(in); err != nil || got != want {
			t.Errorf("ParseHeadersFormat(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	if _, err := ParseHeadersFormat("draft-7"); err == nil {
		t.Error("ParseHeadersFormat(draft-7) = nil error, want one")
	}
}

// compactJSON re-encodes b with sorted keys and no spaces.
func compactJSON(t *testing.T, b []byte) string {
	t.Helper()
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("%s: %v", b, err)
	}
	out, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}
