package rules

import (
	"strings"
	"testing"
)

// The configuration examples of envoyproxy/ratelimit's README (Examples 1
// to 11) and the answers it documents for them, as table tests of the
// loader and of Match.

// Example 1: two values of one key, each 500 per second.
func TestReadmeExample1(t *testing.T) {
	t.Parallel()
	s := mustParse(t, `
domain: mongo_cps
descriptors:
  - key: database
    value: users
    rate_limit: {unit: second, requests_per_unit: 500}
  - key: database
    value: default
    rate_limit: {unit: second, requests_per_unit: 500}
`)
	checkQueries(t, s, "mongo_cps", []query{
		{entries: e("database", "users"), want: want{rpu: 500, unit: "second"}},
		{entries: e("database", "default"), want: want{rpu: 500, unit: "second"}},
		{entries: e("database", "orders"), want: none},
		{domain: "other", entries: e("database", "users"), want: none},
	})
}

// Example 2: nested descriptors; a key without value gives every value
// its own counter.
func TestReadmeExample2(t *testing.T) {
	t.Parallel()
	s := mustParse(t, `
domain: messaging
descriptors:
  - key: message_type
    value: marketing
    descriptors:
      - key: to_number
        rate_limit: {unit: day, requests_per_unit: 5}
  - key: to_number
    rate_limit: {unit: day, requests_per_unit: 100}
`)
	checkQueries(t, s, "messaging", []query{
		{entries: e("message_type", "marketing", "to_number", "2061111111"), want: want{rpu: 5, unit: "day"}},
		{entries: e("message_type", "marketing", "to_number", "2062222222"), want: want{rpu: 5, unit: "day"}},
		{entries: e("to_number", "2061111111"), want: want{rpu: 100, unit: "day"}},
		{entries: e("message_type", "marketing"), want: none}, // a branch without rate_limit
		{entries: e("message_type", "transactional", "to_number", "2061111111"), want: none},
	})
	k1 := key(t, s, "messaging", e("message_type", "marketing", "to_number", "2061111111"))
	k2 := key(t, s, "messaging", e("message_type", "marketing", "to_number", "2062222222"))
	k3 := key(t, s, "messaging", e("to_number", "2061111111"))
	if k1 == k2 || k1 == k3 || k2 == k3 {
		t.Errorf("counters shared: %q, %q, %q", k1, k2, k3)
	}
}

// Example 3: the exact value is tried before the key alone; 0 requests
// per unit blocks.
func TestReadmeExample3(t *testing.T) {
	t.Parallel()
	s := mustParse(t, `
domain: edge_proxy_per_ip
descriptors:
  - key: remote_address
    rate_limit: {unit: second, requests_per_unit: 10}
  - key: remote_address
    value: 50.0.0.5
    rate_limit: {unit: second, requests_per_unit: 0}
`)
	checkQueries(t, s, "edge_proxy_per_ip", []query{
		{entries: e("remote_address", "50.0.0.1"), want: want{rpu: 10, unit: "second"}},
		{entries: e("remote_address", "50.0.0.5"), want: want{rpu: 0, unit: "second"}},
	})
	m, _ := s.Match("edge_proxy_per_ip", e("remote_address", "50.0.0.5"))
	if !m.Limits[0].Blocks() {
		t.Errorf("requests_per_unit 0: Blocks() = false")
	}
}

// Example 4: a descriptor matches only a rule at the depth of its last entry.
func TestReadmeExample4(t *testing.T) {
	t.Parallel()
	shallow := mustParse(t, `
domain: example4
descriptors:
  - key: key
    value: value
    rate_limit: {requests_per_unit: 300, unit: second}
`)
	deep := mustParse(t, `
domain: example4
descriptors:
  - key: key
    value: value
    descriptors:
      - key: subkey
        rate_limit: {requests_per_unit: 300, unit: second}
`)
	req := e("key", "value", "subkey", "subvalue")
	checkQueries(t, shallow, "example4", []query{{entries: req, want: none}})
	checkQueries(t, deep, "example4", []query{
		{entries: req, want: want{rpu: 300, unit: "second"}},
		{entries: e("key", "value"), want: none},
	})
}

// Example 5: unlimited descriptors are known and never limited.
func TestReadmeExample5(t *testing.T) {
	t.Parallel()
	s := mustParse(t, `
domain: internal
descriptors:
  - key: ldap
    rate_limit:
      unlimited: true
  - key: azure
    rate_limit: {unit: minute, requests_per_unit: 100}
`)
	checkQueries(t, s, "internal", []query{
		{entries: e("ldap", "x"), want: want{unlimited: true}},
		{entries: e("azure", "x"), want: want{rpu: 100, unit: "minute"}},
		{entries: e("gcp", "x"), want: none},
	})
}

// Example 6: shadow_mode is per rule.
func TestReadmeExample6(t *testing.T) {
	t.Parallel()
	s := mustParse(t, `
domain: example6
descriptors:
  - key: service
    descriptors:
      - key: user
        value: user-a
        rate_limit: {requests_per_unit: 10, unit: second}
        shadow_mode: true
      - key: user
        value: user-b
        rate_limit: {requests_per_unit: 20, unit: second}
`)
	checkQueries(t, s, "example6", []query{
		{entries: e("service", "auth-service", "user", "user-a"), want: want{rpu: 10, unit: "second", shadow: true}},
		{entries: e("service", "auth-service", "user", "user-b"), want: want{rpu: 20, unit: "second"}},
		{entries: e("service", "auth-service", "user", "user-c"), want: none},
	})
}

// Example 7: a rule names the rule it replaces.
func TestReadmeExample7(t *testing.T) {
	t.Parallel()
	s := mustParse(t, `
domain: example7
descriptors:
  - key: key_1
    value: value_1
    descriptors:
      - key: user
        value: bkthomps
        rate_limit: {name: specific_limit, requests_per_unit: 5, unit: second}
  - key: key_2
    value: value_2
    descriptors:
      - key: user
        value: bkthomps
        rate_limit:
          replaces:
            - name: specific_limit
          requests_per_unit: 10
          unit: second
`)
	checkQueries(t, s, "example7", []query{
		{entries: e("key_1", "value_1", "user", "bkthomps"), want: want{rpu: 5, unit: "second", name: "specific_limit"}},
		{entries: e("key_2", "value_2", "user", "bkthomps"), want: want{rpu: 10, unit: "second", replaces: []string{"specific_limit"},
			name: "example7.key_2_value_2.user_bkthomps"}},
	})
}

// Example 8: detailed_metric is accepted (it changes metrics only).
func TestReadmeExample8(t *testing.T) {
	t.Parallel()
	s := mustParse(t, `
domain: example8
descriptors:
  - key: key1
    detailed_metric: true
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: key1
    value: value1
    rate_limit: {unit: minute, requests_per_unit: 20}
`)
	checkQueries(t, s, "example8", []query{
		{entries: e("key1", "unspecified_value"), want: want{rpu: 10, unit: "minute"}},
		{entries: e("key1", "unspecified_value2"), want: want{rpu: 10, unit: "minute"}},
		{entries: e("key1", "value1"), want: want{rpu: 20, unit: "minute"}},
	})
}

// Example 9: wildcard values, '*' anywhere, each matching any run.
func TestReadmeExample9(t *testing.T) {
	t.Parallel()
	s := mustParse(t, `
domain: example9
descriptors:
  - key: key1
    value: value*
    rate_limit: {unit: minute, requests_per_unit: 20}
  - key: path
    value: /api/*/action
    rate_limit: {unit: minute, requests_per_unit: 21}
  - key: route
    value: /api/*/resource/*/action
    rate_limit: {unit: minute, requests_per_unit: 22}
`)
	w := func(n int64) want { return want{rpu: n, unit: "minute"} }
	checkQueries(t, s, "example9", []query{
		{entries: e("key1", "value1"), want: w(20)},
		{entries: e("key1", "valueXYZ"), want: w(20)},
		{entries: e("key1", "value"), want: w(20)},
		{entries: e("key1", "valu"), want: none},
		{entries: e("path", "/api/123/action"), want: w(21)},
		{entries: e("path", "/api/user-id/action"), want: w(21)},
		{entries: e("path", "/api/123/other"), want: none},
		{entries: e("route", "/api/v1/resource/123/action"), want: w(22)},
		{entries: e("route", "/api/v2/resource/456/action"), want: w(22)},
		{entries: e("route", "/api/v2/resource/action"), want: none},
	})
	// Each value a wildcard matches has its own counter.
	if key(t, s, "example9", e("key1", "value1")) == key(t, s, "example9", e("key1", "value2")) {
		t.Error("wildcard values share a counter without share_threshold")
	}
}

// Example 10: value_to_metric is accepted (it changes metrics only).
func TestReadmeExample10(t *testing.T) {
	t.Parallel()
	s := mustParse(t, `
domain: example10
descriptors:
  - key: route
    value_to_metric: true
    descriptors:
      - key: http_method
        value_to_metric: true
        descriptors:
          - key: subject_id
            rate_limit: {unit: minute, requests_per_unit: 60}
`)
	checkQueries(t, s, "example10", []query{
		{entries: e("route", "api", "http_method", "GET", "subject_id", "123"), want: want{rpu: 60, unit: "minute"}},
		{entries: e("route", "web", "http_method", "POST", "subject_id", "456"), want: want{rpu: 60, unit: "minute"}},
	})
}

// Example 11: share_threshold makes every value of a wildcard share one counter.
func TestReadmeExample11(t *testing.T) {
	t.Parallel()
	s := mustParse(t, `
domain: example11
descriptors:
  - key: files
    value: files/*
    share_threshold: true
    rate_limit: {unit: hour, requests_per_unit: 10}
  - key: files_no_share
    value: files_no_share/*
    share_threshold: false
    rate_limit: {unit: hour, requests_per_unit: 10}
`)
	a, b := key(t, s, "example11", e("files", "files/a.pdf")), key(t, s, "example11", e("files", "files/b.csv"))
	if a != b {
		t.Errorf("share_threshold: keys %q and %q differ", a, b)
	}
	c, d := key(t, s, "example11", e("files_no_share", "files_no_share/a.pdf")), key(t, s, "example11", e("files_no_share", "files_no_share/b.csv"))
	if c == d {
		t.Errorf("without share_threshold: both values count under %q", c)
	}
	// A literal value equal to the pattern is not the shared counter.
	lit := mustParse(t, "domain: example11\ndescriptors:\n  - key: files\n    rate_limit: {unit: hour, requests_per_unit: 1}\n")
	if k := key(t, lit, "example11", e("files", "files/*")); k == a {
		t.Errorf("the literal value %q shares the key %q of the pattern", "files/*", k)
	}
	if !strings.Contains(a, "files/*") {
		t.Errorf("shared key %q does not name the pattern", a)
	}
}
