package rules

import (
	"strings"
	"testing"
)

func TestExampleRLQSRules(t *testing.T) {
	set, err := Load("../examples/rlqs/rules.yaml")
	if err != nil {
		t.Fatal(err)
	}
	m := set.MatchQuota("edge", map[string]string{"tenant": "acme", "path": "/x"})
	if m.Rule != "per_tenant" || m.PerSecond != 100 {
		t.Fatalf("MatchQuota(edge, tenant=acme) = %+v, want per_tenant at 100/s", m)
	}
	other := set.MatchQuota("edge", map[string]string{"tenant": "globex"})
	if other.Key == m.Key {
		t.Errorf("tenants acme and globex share the key %q: want a bucket per tenant value", m.Key)
	}
	same := set.MatchQuota("edge", map[string]string{"tenant": "acme", "path": "/y"})
	if same.Key != m.Key {
		t.Errorf("entries the rule does not name changed the key: %q, %q", same.Key, m.Key)
	}
	if none := set.MatchQuota("edge", map[string]string{"path": "/x"}); none.Rule != "" || none.Default != QuotaAllow {
		t.Errorf("MatchQuota(edge, no tenant) = %+v, want the default allow", none)
	}
	if none := set.MatchQuota("other", map[string]string{"tenant": "a"}); none.Rule != "" || none.Default != QuotaNone {
		t.Errorf("MatchQuota(unknown domain) = %+v, want no assignment", none)
	}
}

func TestQuotaRulesMatchValues(t *testing.T) {
	set, err := Parse("q.yaml", []byte(`domain: d
rlqs:
  default: deny
  buckets:
    - name: vip
      entries: [{key: tenant, value: "vip-*"}, {key: route}]
      rate_limit: {unit: minute, requests_per_unit: 600}
    - name: exact
      entries: [{key: tenant, value: acme}]
      rate_limit: {unit: second, requests_per_unit: 5}
`))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		bucket map[string]string
		rule   string
		perSec float64
	}{
		{map[string]string{"tenant": "vip-1", "route": "a"}, "vip", 10},
		{map[string]string{"tenant": "vip-1"}, "", 0},
		{map[string]string{"tenant": "acme", "route": "a"}, "exact", 5},
		{map[string]string{"tenant": "other"}, "", 0},
	} {
		m := set.MatchQuota("d", tc.bucket)
		if m.Rule != tc.rule || m.PerSecond != tc.perSec {
			t.Errorf("MatchQuota(d, %v) = %+v, want rule %q at %v/s", tc.bucket, m, tc.rule, tc.perSec)
		}
		if m.Rule == "" && m.Default != QuotaDeny {
			t.Errorf("MatchQuota(d, %v).Default = %v, want deny", tc.bucket, m.Default)
		}
	}
}

func TestQuotaRulesErrors(t *testing.T) {
	for _, tc := range []struct{ yaml, want string }{
		{"domain: d\nrlqs: {default: maybe}\n", "unknown rlqs default"},
		{"domain: d\nrlqs: {buckets: [{name: a, rate_limit: {unit: second, requests_per_unit: 1}}]}\n", "no entries"},
		{"domain: d\nrlqs: {buckets: [{name: a, entries: [{key: k}]}]}\n", "no rate_limit"},
		{"domain: d\nrlqs: {buckets: [{entries: [{key: k}], rate_limit: {unit: second, requests_per_unit: 1}}]}\n", "needs a name"},
		{"domain: d\nrlqs: {buckets: [{name: a, entries: [{value: v}], rate_limit: {unit: second, requests_per_unit: 1}}]}\n", "needs a key"},
		{"domain: d\nrlqs: {buckets: [{name: a, entries: [{key: k}], rate_limit: {unit: parsec, requests_per_unit: 1}}]}\n", "unknown unit"},
	} {
		_, err := Parse("q.yaml", []byte(tc.yaml))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Parse(%q) = %v, want an error with %q", tc.yaml, err, tc.want)
		}
	}
}
