package rules

import (
	"errors"
	"strings"
	"testing"
)

// TestParseErrors: each broken file is refused with the file, the line of
// the first problem and what it is. Most cases are envoyproxy/ratelimit's
// own error cases; the others are this format's extensions.
func TestParseErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, yaml, want string
	}{
		{"empty file", "", "rules: c.yaml: the file is empty: it needs a domain"},
		{"empty domain", "descriptors:\n", "rules: c.yaml:1: domain is empty or missing"},
		{"bad YAML", "domain: d\ndescriptors:\n  - key: a\n   value: [\n", "rules: c.yaml:2: invalid YAML: did not find expected '-' indicator"},
		{"unclosed", "domain: d\ndescriptors: [\n", "rules: c.yaml:2: invalid YAML: did not find expected node content"},
		{"empty key", "domain: d\ndescriptors:\n  - value: v\n", "rules: c.yaml:3: descriptor has an empty or missing key"},
		{"duplicate key", "domain: d\ndescriptors:\n  - key: a\n    value: v\n\n  - key: a\n    value: v\n",
			`rules: c.yaml:6: duplicate descriptor key "a" value "v" (first on line 3)`},
		{"duplicate key only", "domain: d\ndescriptors:\n  - key: a\n  - key: a\n    value: ''\n",
			`rules: c.yaml:4: duplicate descriptor key "a" (first on line 3)`},
		{"bad unit", "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: fortnight\n      requests_per_unit: 5\n",
			`rules: c.yaml:5: unknown unit "fortnight"`},
		{"no unit", "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      requests_per_unit: 5\n",
			"rules: c.yaml:5: rate limit has no unit (second, minute, hour, day, week, month or year)"},
		{"no requests_per_unit", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: day}\n",
			"rules: c.yaml:4: rate limit has no requests_per_unit"},
		{"misspelled rate_limit", "domain: d\ndescriptors:\n  - key: a\n    ratelimit:\n      unit: day\n",
			`rules: c.yaml:4: unknown field "ratelimit" in a descriptor`},
		{"misspelled requests_per_unit", "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: day\n      requestsperunit: 5\n",
			`rules: c.yaml:6: unknown field "requestsperunit" in a rate limit`},
		{"metadata not a mapping", "domain: d\ndescriptors:\n  - key: a\n    metadata: [1, 2]\n    rate_limit: {unit: day, requests_per_unit: 5}\n",
			"rules: c.yaml:4: metadata must be a mapping, not a list"},
		{"metadata without a JSON form", "domain: d\ndescriptors:\n  - key: a\n    metadata: {m: {1: x}}\n    rate_limit: {unit: day, requests_per_unit: 5}\n",
			"rules: c.yaml:4: metadata: m: a value of type map[interface {}]interface {} has no JSON form"},
		{"top-level typo", "domain: d\ndescriptor:\n", `rules: c.yaml:2: unknown field "descriptor" in the file`},
		{"non-string key", "0.25: test-domain\ndescriptors:\n", "rules: c.yaml:1: the file has a key that is not a string: 0.25"},
		{"list of scalars", "domain: d\ndescriptors:\n  - a\n  - b\n", `rules: c.yaml:3: a descriptor must be a mapping, not "a"`},
		{"descriptors not a list", "domain: d\ndescriptors: {key: a}\n", "rules: c.yaml:2: descriptors must be a list, not a mapping"},
		{"repeated field", "domain: d\ndomain: e\n", `rules: c.yaml:2: field "domain" repeated (first on line 1)`},
		{"replaces self", "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      name: self\n      replaces:\n        - name: self\n      unit: second\n      requests_per_unit: 5\n",
			`rules: c.yaml:5: replaces names the descriptor's own rate limit "self"`},
		{"replaces empty", "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      name: self\n      replaces:\n        - name:\n      unit: second\n      requests_per_unit: 5\n",
			"rules: c.yaml:7: replaces entry has an empty name"},
		{"unlimited with unit", "domain: d\ndescriptors:\n  - key: foo\n    rate_limit:\n      unlimited: true\n      unit: day\n      requests_per_unit: 25\n",
			"rules: c.yaml:6: unit must not be set when unlimited is true"},
		{"shadow_mode not a bool", "domain: d\ndescriptors:\n  - key: a\n    shadow_mode: sometimes\n",
			`rules: c.yaml:4: shadow_mode must be true or false, not "sometimes"`},
		{"negative requests_per_unit", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: -1}\n",
			"rules: c.yaml:4: requests_per_unit must be in [0, 1000000000], got -1"},
		{"fractional requests_per_unit", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 2.5}\n",
			"rules: c.yaml:4: requests_per_unit must be a whole number, not 2.5"},
		{"huge requests_per_unit", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 4294967295}\n",
			"rules: c.yaml:4: requests_per_unit must be in [0, 1000000000], got 4294967295"},
		{"share_threshold without wildcard", "domain: d\ndescriptors:\n  - key: a\n    value: b\n    share_threshold: true\n",
			`rules: c.yaml:5: share_threshold applies to wildcard values (with '*') only, not key "a" value "b"`},

		// Extensions.
		{"unknown algorithm", "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: second\n      requests_per_unit: 5\n      algorithm: GCRA\n",
			`rules: c.yaml:7: unknown algorithm "GCRA" (TOKEN_BUCKET, LEAKY_BUCKET, FIXED_WINDOW, SLIDING_WINDOW or SLIDING_LOG)`},
		{"burst with fixed window", "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: second\n      requests_per_unit: 5\n      burst: 10\n",
			"rules: c.yaml:7: burst applies to TOKEN_BUCKET and LEAKY_BUCKET only, not FIXED_WINDOW"},
		{"sliding log too long", "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: second\n      requests_per_unit: 200000\n      algorithm: SLIDING_LOG\n",
			"rules: c.yaml:7: SLIDING_LOG limit must be <= …"},
		{"both rate_limit and rate_limits", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1}\n    rate_limits:\n      - {unit: hour, requests_per_unit: 5}\n",
			"rules: c.yaml:5: rate_limit and rate_limits are both set (line 4); keep one"},
		{"empty rate_limits", "domain: d\ndescriptors:\n  - key: a\n    rate_limits: []\n", "rules: c.yaml:4: rate_limits is empty"},
		{"unlimited among rate_limits", "domain: d\ndescriptors:\n  - key: a\n    rate_limits:\n      - {unit: second, requests_per_unit: 1}\n      - {unlimited: true}\n",
			"rules: c.yaml:6: an unlimited rate limit cannot be combined with other limits"},
		{"second document broken", "domain: d\n---\ndomain: e\ndescriptors:\n  - key: a\n    rate_limit: {unit: lightyear, requests_per_unit: 1}\n",
			`rules: c.yaml:6: unknown unit "lightyear"`},
		{"duplicate domain in one file", "domain: d\n---\ndomain: d\n", `rules: c.yaml:3: duplicate domain "d" (first in c.yaml:1)`},
	}
	for _, tt := range tests {
		_, err := Parse("c.yaml", []byte(tt.yaml))
		prefix, cut := strings.CutSuffix(tt.want, "…") // the rest is limit's message
		if err == nil || !cut && err.Error() != tt.want || cut && !strings.HasPrefix(err.Error(), prefix) {
			t.Errorf("%s: Parse = %v\nwant %s", tt.name, err, tt.want)
			continue
		}
		var ce *ConfigError
		if !errors.As(err, &ce) || ce.File != "c.yaml" {
			t.Errorf("%s: %T %+v is not a *ConfigError of c.yaml", tt.name, err, err)
		}
	}
}
