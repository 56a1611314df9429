package rules

import (
	"strings"
	"testing"
)

// A rate limit's lease field: absent or true, its checks may be decided
// from leases; false keeps them with the key's owner (limit.Rule.NoLease).
// It is validated: a boolean, on an algorithm that is leased, not on an
// unlimited limit.
func TestLeaseField(t *testing.T) {
	t.Parallel()
	s := mustParse(t, `domain: d
descriptors:
  - key: a
    rate_limit: {name: plain, unit: second, requests_per_unit: 5, algorithm: TOKEN_BUCKET}
  - key: b
    rate_limit: {name: on, unit: second, requests_per_unit: 5, algorithm: FIXED_WINDOW, lease: true}
  - key: c
    rate_limit: {name: off, unit: second, requests_per_unit: 5, algorithm: TOKEN_BUCKET, lease: false}
`)
	for name, want := range map[string]bool{"plain": false, "on": false, "off": true} {
		r, ok := s.ByName(name)
		if !ok || r.NoLease != want {
			t.Errorf("rule %s: %+v (found %v), want NoLease %v", name, r, ok, want)
		}
	}
	b, err := s.MarshalJSON()
	if err != nil || strings.Count(string(b), `"lease":false`) != 1 {
		t.Errorf("JSON form: %s (%v), want one \"lease\":false", b, err)
	}
	for _, c := range []struct{ name, limit, want string }{
		{"not a boolean", "{unit: second, requests_per_unit: 5, algorithm: TOKEN_BUCKET, lease: maybe}", "lease must be true or false"},
		{"an algorithm never leased", "{unit: second, requests_per_unit: 5, algorithm: LEAKY_BUCKET, lease: true}", "lease: true applies to TOKEN_BUCKET, FIXED_WINDOW and SLIDING_WINDOW; LEAKY_BUCKET is always decided by its key's owner"},
		{"unlimited", "{unlimited: true, lease: false}", "lease must not be set when unlimited is true"},
	} {
		_, err := Parse("c.yaml", []byte("domain: d\ndescriptors:\n  - key: a\n    rate_limit: "+c.limit+"\n"))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error with %q", c.name, err, c.want)
		}
	}
	// lease: false on an algorithm never leased is allowed: it says what
	// happens anyway.
	if _, err := Parse("c.yaml", []byte("domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 5, algorithm: SLIDING_LOG, lease: false}\n")); err != nil {
		t.Errorf("lease: false on SLIDING_LOG: %v", err)
	}
}
