package rls

import (
	"fmt"
	"slices"
	"testing"

	ratelimitpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typepb "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/shardlimiter/shardlimiter/limit"
	"github.com/shardlimiter/shardlimiter/rules"
)

// checkText is a check as the plan table writes it: name, hits, the rule's
// limit and period, and "+" when it is chained to the next.
func checkText(c limit.Check) string {
	s := fmt.Sprintf("%s hits=%d %d/%v %v", c.Name, c.Hits, c.Rule.Limit, c.Rule.Period, c.Rule.Algorithm)
	if c.Chained {
		s += " +"
	}
	return s
}

func withHits(d *ratelimitpb.RateLimitDescriptor, hits uint64) *ratelimitpb.RateLimitDescriptor {
	d.HitsAddend = wrapperspb.UInt64(hits)
	return d
}

func withOverride(d *ratelimitpb.RateLimitDescriptor, n uint32, unit typepb.RateLimitUnit) *ratelimitpb.RateLimitDescriptor {
	d.Limit = &ratelimitpb.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: n, Unit: unit}
	return d
}

// TestPlan: the checks each request becomes, and what each descriptor is.
func TestPlan(t *testing.T) {
	t.Parallel()
	set, err := rules.Parse("rules.yaml", []byte(testRules))
	if err != nil {
		t.Fatal(err)
	}
	const min = "1m0s FIXED_WINDOW"
	for _, tc := range []struct {
		name   string
		domain string
		hits   uint32 // the request's hits_addend
		descs  []*ratelimitpb.RateLimitDescriptor
		want   []string
		kinds  []kind
	}{
		{"hits_addend unset counts 1", "d", 0, []*ratelimitpb.RateLimitDescriptor{entries("k", "a")},
			[]string{"per_min hits=1 10/" + min}, []kind{checked}},
		{"request hits_addend", "d", 3, []*ratelimitpb.RateLimitDescriptor{entries("k", "a")},
			[]string{"per_min hits=3 10/" + min}, []kind{checked}},
		{"descriptor hits_addend 0 checks only", "d", 3, []*ratelimitpb.RateLimitDescriptor{withHits(entries("k", "a"), 0)},
			[]string{"per_min hits=0 10/" + min}, []kind{checked}},
		{"descriptor hits_addend wins", "d", 3, []*ratelimitpb.RateLimitDescriptor{withHits(entries("k", "a"), 5)},
			[]string{"per_min hits=5 10/" + min}, []kind{checked}},
		{"limit override", "d", 0, []*ratelimitpb.RateLimitDescriptor{withOverride(entries("k", "a"), 7, typepb.RateLimitUnit_HOUR)},
			[]string{"override_hour hits=1 7/1h0m0s FIXED_WINDOW"}, []kind{checked}},
		{"override of an unknown descriptor", "nodomain", 0, []*ratelimitpb.RateLimitDescriptor{withOverride(entries("x", "y"), 2, typepb.RateLimitUnit_SECOND)},
			[]string{"override_second hits=1 2/1s FIXED_WINDOW"}, []kind{checked}},
		{"unlimited", "d", 0, []*ratelimitpb.RateLimitDescriptor{entries("free", "a")}, nil, []kind{unlimited}},
		{"shadow is checked", "d", 0, []*ratelimitpb.RateLimitDescriptor{entries("shadow", "a")},
			[]string{"shadowed hits=1 1/1s FIXED_WINDOW"}, []kind{checked}},
		{"replaces across descriptors", "d", 0, []*ratelimitpb.RateLimitDescriptor{entries("k", "a"), entries("new", "a")},
			[]string{"new_min hits=1 3/" + min}, []kind{replaced, checked}},
		{"rate_limits are one group", "d", 2, []*ratelimitpb.RateLimitDescriptor{entries("tiered", "a"), entries("k", "b")},
			[]string{"tier_sec hits=2 5/1s FIXED_WINDOW +", "tier_hour hits=2 100/1h0m0s SLIDING_LOG", "per_min hits=2 10/" + min},
			[]kind{checked, checked}},
		{"requests_per_unit 0 blocks without a check", "d", 0, []*ratelimitpb.RateLimitDescriptor{entries("blocked", "a")}, nil, []kind{blocked}},
		{"unknown domain and descriptor", "other", 0, []*ratelimitpb.RateLimitDescriptor{entries("k", "a")}, nil, []kind{noRule}},
		{"no rule for the entries", "d", 0, []*ratelimitpb.RateLimitDescriptor{entries("nope", "a")}, nil, []kind{noRule}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := plan(set, &rlspb.RateLimitRequest{Domain: tc.domain, HitsAddend: tc.hits, Descriptors: tc.descs})
			var got []string
			for _, c := range p.checks {
				got = append(got, checkText(c))
				if !c.Rule.Behavior.Has(limit.Overdraft) {
					t.Errorf("check %s has behavior %v, want OVERDRAFT (envoyproxy/ratelimit's counting)", checkText(c), c.Rule.Behavior)
				}
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("checks = %q, want %q", got, tc.want)
			}
			var kinds []kind
			for _, d := range p.descs {
				kinds = append(kinds, d.kind)
			}
			if !slices.Equal(kinds, tc.kinds) {
				t.Errorf("kinds = %v, want %v", kinds, tc.kinds)
			}
			for _, d := range p.descs {
				if d.kind != checked {
					continue
				}
				for _, c := range p.checks[d.first : d.first+d.n] {
					if c.Key == "" || c.Key != p.checks[d.first].Key {
						t.Errorf("descriptor's checks keyed %q and %q: one descriptor, one key", p.checks[d.first].Key, c.Key)
					}
				}
			}
		})
	}
}

// TestPlanKeys: the ring routes on the domain and the entries: different
// values, domains or overrides get different keys; one descriptor sent
// twice gets the same.
func TestPlanKeys(t *testing.T) {
	t.Parallel()
	set, err := rules.Parse("rules.yaml", []byte(testRules))
	if err != nil {
		t.Fatal(err)
	}
	key := func(domain string, d *ratelimitpb.RateLimitDescriptor) string {
		p := plan(set, &rlspb.RateLimitRequest{Domain: domain, Descriptors: []*ratelimitpb.RateLimitDescriptor{d}})
		if len(p.checks) == 0 {
			t.Fatalf("no check for %v", d)
		}
		return p.checks[0].Key
	}
	a, a2, b := key("d", entries("k", "a")), key("d", entries("k", "a")), key("d", entries("k", "b"))
	o := key("d", withOverride(entries("k", "a"), 7, typepb.RateLimitUnit_HOUR))
	o2 := key("e", withOverride(entries("k", "a"), 7, typepb.RateLimitUnit_HOUR))
	if a != a2 || a == b || o == o2 {
		t.Errorf("keys a=%q a again=%q b=%q override d=%q e=%q: want a equal, the rest distinct", a, a2, b, o, o2)
	}
}

func TestTooManyDescriptorsRefused(t *testing.T) {
	t.Parallel()
	req := &rlspb.RateLimitRequest{Domain: "d"}
	for range MaxDescriptors + 1 {
		req.Descriptors = append(req.Descriptors, &ratelimitpb.RateLimitDescriptor{
			Entries: []*ratelimitpb.RateLimitDescriptor_Entry{{Key: "k", Value: "v"}}})
	}
	if err := validRequest(req); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("validRequest(%d descriptors) = %v, want InvalidArgument", len(req.Descriptors), err)
	}
	req.Descriptors = req.Descriptors[:MaxDescriptors]
	if err := validRequest(req); err != nil {
		t.Fatalf("validRequest(%d descriptors) = %v, want nil", len(req.Descriptors), err)
	}
}
