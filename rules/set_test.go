package rules

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// basicYAML covers the decisions of envoyproxy/ratelimit's basic loader
// test: defaults per key, overrides per value, an allow-listed value, a
// rule with nested rules, names, unlimited.
const basicYAML = `
domain: test-domain
descriptors:
  - key: key1            # a branch: no rule of its own
    value: value1
    descriptors:
      - key: subkey1     # any value: 5/s
        rate_limit: {unit: second, requests_per_unit: 5}
      - key: subkey1     # this value: 10/s
        value: subvalue1
        rate_limit: {unit: second, requests_per_unit: 10}
  - key: key2
    rate_limit: {unit: minute, requests_per_unit: 20}
  - key: key2
    value: value2
    rate_limit: {unit: minute, requests_per_unit: 30}
  - key: key2            # allow-listed: no rule, and no fallback to key2
    value: value3
  - key: key3
    rate_limit: {unit: hour, requests_per_unit: 1}
  - key: key4
    rate_limit: {name: key4_rate_limit, unit: day, requests_per_unit: 1}
  - key: key5
    value: value5
    rate_limit: {unit: day, requests_per_unit: 15}
    descriptors:
      - key: subkey5
        value: subvalue5
        rate_limit: {unit: day, requests_per_unit: 25}
  - key: key6
    rate_limit: {unlimited: true}
  - key: key7
    detailed_metric: true
    rate_limit: {unit: minute, requests_per_unit: 70}
`

func TestBasicDecisions(t *testing.T) {
	t.Parallel()
	s := mustParse(t, basicYAML)
	checkQueries(t, s, "test-domain", []query{
		{domain: "foo_domain", entries: e("key1", "value1"), want: none},
		{entries: nil, want: none},
		{entries: e("key1", "something"), want: none},
		{entries: e("key1", "value1"), want: none},
		{entries: e("key2", "value2", "subkey", "subvalue"), want: none},
		{entries: e("key5", "value5", "subkey5", "subvalue"), want: none},
		{entries: e("key1", "value1", "subkey1", "something"), want: want{rpu: 5, unit: "second", name: "test-domain.key1_value1.subkey1"}},
		{entries: e("key1", "value1", "subkey1", "subvalue1"), want: want{rpu: 10, unit: "second"}},
		{entries: e("key2", "something"), want: want{rpu: 20, unit: "minute", name: "test-domain.key2"}},
		{entries: e("key2", "value2"), want: want{rpu: 30, unit: "minute"}},
		{entries: e("key2", "value3"), want: none},
		{entries: e("key3", "foo"), want: want{rpu: 1, unit: "hour"}},
		{entries: e("key4", "foo"), want: want{rpu: 1, unit: "day", name: "key4_rate_limit"}},
		{entries: e("key5", "value5"), want: want{rpu: 15, unit: "day"}},
		{entries: e("key5", "value5", "subkey5", "subvalue5"), want: want{rpu: 25, unit: "day"}},
		{entries: e("key6", "foo"), want: want{unlimited: true}},
		{entries: e("key7", "unspecified_value"), want: want{rpu: 70, unit: "minute"}},
		{entries: e("key2", ""), want: want{rpu: 20, unit: "minute"}}, // an empty value matches the key alone
	})
}

// TestWildcardDecisions: envoyproxy/ratelimit's wildcard loader test.
func TestWildcardDecisions(t *testing.T) {
	t.Parallel()
	s := mustParse(t, `
domain: test-domain
descriptors:
  - {key: wild, value: foo*, rate_limit: {unit: minute, requests_per_unit: 20}}
  - {key: noWild, value: foo, rate_limit: {unit: minute, requests_per_unit: 21}}
  - {key: noVal, rate_limit: {unit: minute, requests_per_unit: 22}}
  - {key: midWild, value: bar*b, rate_limit: {unit: minute, requests_per_unit: 23}}
  - {key: multiWild, value: foo*bar*baz, rate_limit: {unit: minute, requests_per_unit: 24}}
  - key: nestedWild
    value: val1
    descriptors:
      - {key: wild, value: goo*, rate_limit: {unit: minute, requests_per_unit: 25}}
  - {key: order, value: a*, rate_limit: {unit: minute, requests_per_unit: 26}}
  - {key: order, value: ab*, rate_limit: {unit: minute, requests_per_unit: 27}}
  - {key: order, value: abc, rate_limit: {unit: minute, requests_per_unit: 28}}
  - {key: order, rate_limit: {unit: minute, requests_per_unit: 29}}
`)
	w := func(n int64) want { return want{rpu: n, unit: "minute"} }
	checkQueries(t, s, "test-domain", []query{
		{entries: e("wild", "foo1"), want: w(20)},
		{entries: e("wild", "foo"), want: w(20)},
		{entries: e("wild", "fo"), want: none},
		{entries: e("noWild", "foo"), want: w(21)},
		{entries: e("noWild", "foo1"), want: none},
		{entries: e("noVal", "foo1"), want: w(22)},
		{entries: e("midWild", "barb"), want: w(23)},
		{entries: e("midWild", "barfoob"), want: w(23)},
		{entries: e("midWild", "barfoo"), want: none},
		{entries: e("midWild", "bar"), want: none},
		{entries: e("multiWild", "foo1bar2baz"), want: w(24)},
		{entries: e("multiWild", "foobarbaz"), want: w(24)},
		{entries: e("multiWild", "foobazbar"), want: none},
		{entries: e("nestedWild", "val1", "wild", "goo2"), want: w(25)},
		{entries: e("nestedWild", "val1", "wild", "foo2"), want: none},
		// Exact first, then wildcards in file order, then the key alone.
		{entries: e("order", "abc"), want: w(28)},
		{entries: e("order", "abd"), want: w(26)},
		{entries: e("order", "x"), want: w(29)},
	})
}

// TestCounterKeyUnambiguous: entries whose concatenations agree still get
// different counters, and the key names domain, keys and values.
func TestCounterKeyUnambiguous(t *testing.T) {
	t.Parallel()
	s := mustParse(t, "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1}\n  - key: a_b\n    rate_limit: {unit: second, requests_per_unit: 1}\n")
	k1 := key(t, s, "d", e("a", "b_c"))
	k2 := key(t, s, "d", e("a_b", "c"))
	if k1 == k2 {
		t.Errorf("keys agree: %q", k1)
	}
	if want := "1:d1:a=3:b_c"; k1 != want {
		t.Errorf("Key = %q, want %q", k1, want)
	}
}

// TestMatchAllocs: a match allocates its key and nothing else.
func TestMatchAllocs(t *testing.T) {
	s := mustParse(t, basicYAML)
	es := e("key1", "value1", "subkey1", "something")
	if n := testing.AllocsPerRun(100, func() { s.Match("test-domain", es) }); n > 1 {
		t.Errorf("Match allocates %v times, want 1 (the key)", n)
	}
	if n := testing.AllocsPerRun(100, func() { s.Match("test-domain", es[:1]) }); n != 0 {
		t.Errorf("a miss allocates %v times, want 0", n)
	}
}

// TestByName: written names first (the first of equal names wins), then
// generated names; unlimited rules have none.
func TestByName(t *testing.T) {
	t.Parallel()
	s := mustParse(t, `
domain: d
descriptors:
  - {key: a, rate_limit: {name: shared, unit: second, requests_per_unit: 1}}
  - {key: b, rate_limit: {name: shared, unit: second, requests_per_unit: 2}}
  - {key: c, rate_limit: {name: d.e, unit: minute, requests_per_unit: 3}}
  - {key: e, rate_limit: {unit: minute, requests_per_unit: 4}}
  - {key: u, rate_limit: {name: free, unlimited: true}}
  - {key: z, value: blocked, rate_limit: {name: blocked, unit: second, requests_per_unit: 0}}
`)
	for _, tt := range []struct {
		name string
		lim  int64
		ok   bool
	}{
		{"shared", 1, true}, {"d.e", 3, true}, {"d.a", 0, false}, {"free", 0, false}, {"blocked", 0, true}, {"nope", 0, false},
	} {
		r, ok := s.ByName(tt.name)
		if ok != tt.ok || r.Limit != tt.lim {
			t.Errorf("ByName(%q) = %+v, %v; want limit %d, %v", tt.name, r, ok, tt.lim, tt.ok)
		}
	}
}

// TestVersion: the version ignores layout, comments, file names and the
// order of exact descriptors; it changes with any rule.
func TestVersion(t *testing.T) {
	t.Parallel()
	base := mustParse(t, basicYAML)
	if v := base.Version(); len(v) != 16 || strings.Trim(v, "0123456789abcdef") != "" {
		t.Fatalf("Version() = %q, want 16 hex digits", v)
	}
	same := []string{
		strings.ReplaceAll(basicYAML, "# a branch: no rule of its own", ""),
		// key3 moved before key2 (exact and key-only order does not matter).
		strings.Replace(strings.Replace(basicYAML, "  - key: key3\n    rate_limit: {unit: hour, requests_per_unit: 1}\n", "", 1),
			"  - key: key2\n", "  - key: key3\n    rate_limit: {unit: hour, requests_per_unit: 1}\n  - key: key2\n", 1),
	}
	for i, y := range same {
		s, err := Parse("other-name.yaml", []byte(y))
		if err != nil {
			t.Fatal(err)
		}
		if s.Version() != base.Version() {
			t.Errorf("same rules %d: version %s, want %s", i, s.Version(), base.Version())
		}
	}
	changed := []string{
		strings.Replace(basicYAML, "requests_per_unit: 70", "requests_per_unit: 71", 1),
		strings.Replace(basicYAML, "unit: hour", "unit: day", 1),
		strings.Replace(basicYAML, "key7\n", "key7\n    shadow_mode: true\n", 1),
		strings.Replace(basicYAML, "domain: test-domain", "domain: test-domain2", 1),
	}
	for i, y := range changed {
		if s := mustParse(t, y); s.Version() == base.Version() {
			t.Errorf("changed rules %d: version unchanged %s", i, s.Version())
		}
	}
	var nilSet *Set
	if nilSet.Version() != "" {
		t.Error("nil set has a version")
	}
}

// TestLoad reads files and directories as envoyproxy/ratelimit's runtime
// directory: *.yaml and *.yml, no dot files, each domain once.
func TestLoad(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	write("rules/a.yaml", "domain: a\ndescriptors:\n  - {key: k, rate_limit: {unit: second, requests_per_unit: 1}}\n")
	write("rules/b.yml", "domain: b\n")
	write("rules/.hidden.yaml", "not: valid\n")
	write("rules/notes.txt", "ignored")
	write("rules/..data/a.yaml", "ignored: too\n")
	extra := write("extra.yaml", "domain: c\n")
	s, err := Load(filepath.Join(dir, "rules"), extra)
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	if _, ok := s.Match("a", e("k", "v")); !ok {
		t.Error("domain a not loaded")
	}
	var got struct {
		Domains []struct{ Domain, File string }
	}
	b, _ := s.MarshalJSON()
	if err := json.Unmarshal(b, &got); err != nil || len(got.Domains) != 3 || got.Domains[2].File != extra {
		t.Errorf("MarshalJSON = %s (%v)", b, err)
	}

	dup := write("dup.yaml", "# the same domain again\ndomain: b\n")
	_, err = Load(filepath.Join(dir, "rules"), dup)
	if want := `rules: ` + dup + `:2: duplicate domain "b" (first in ` + filepath.Join(dir, "rules", "b.yml") + `:1)`; err == nil || err.Error() != want {
		t.Errorf("Load with a duplicate domain = %v, want %s", err, want)
	}
	if _, err := Load(filepath.Join(dir, "missing.yaml")); err == nil || !strings.Contains(err.Error(), "missing.yaml: stat: no such file") {
		t.Errorf("Load(missing) = %v", err)
	}
	empty := filepath.Join(dir, "empty")
	if err := os.Mkdir(empty, 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(empty); err == nil || !strings.Contains(err.Error(), "no *.yaml or *.yml file") {
		t.Errorf("Load(empty dir) = %v", err)
	}
	if _, err := Load(); err == nil {
		t.Error("Load() with no path: no error")
	}
}

// TestYAMLFeatures: anchors, aliases and merge keys, several documents,
// numbers as values, and fields accepted and ignored.
func TestYAMLFeatures(t *testing.T) {
	t.Parallel()
	s := mustParse(t, `
domain: a
descriptors:
  - key: status
    value: 200
    metadata: {team: edge, tags: [x, y]}
    value_to_metric: true
    detailed_metric: true
    quota_mode: yes
    shadow_mode: Off
    rate_limit: &std {unit: second, requests_per_unit: 7}
  - key: copy
    rate_limit: *std
  - key: merged
    rate_limit:
      <<: *std
      requests_per_unit: 8
---
domain: b
descriptors:
  - {key: k, rate_limit: {unit: second, requests_per_unit: 1}}
`)
	checkQueries(t, s, "a", []query{
		{entries: e("status", "200"), want: want{rpu: 7, unit: "second"}},
		{entries: e("copy", "x"), want: want{rpu: 7, unit: "second"}},
		{entries: e("merged", "x"), want: want{rpu: 8, unit: "second"}},
		{domain: "b", entries: e("k", "x"), want: want{rpu: 1, unit: "second"}},
	})
	if m, _ := s.Match("a", e("status", "200")); !m.Quota {
		t.Error("quota_mode not reported")
	}
}

func TestStoreAndNilSet(t *testing.T) {
	t.Parallel()
	st := NewStore(nil)
	if s := st.Load(); s != nil {
		t.Fatalf("Load() = %v, want nil", s)
	}
	if _, ok := st.Load().Match("d", e("k", "v")); ok {
		t.Error("a nil set matched")
	}
	if _, ok := st.Load().ByName("x"); ok {
		t.Error("a nil set has a name")
	}
	if b, err := st.Load().MarshalJSON(); err != nil || string(b) != `{"version":"","domains":[]}` {
		t.Errorf("nil MarshalJSON = %s, %v", b, err)
	}
	s := mustParse(t, basicYAML)
	if old := st.Swap(s); old != nil || st.Load() != s {
		t.Errorf("Swap: old %v, Load %v", old, st.Load())
	}
}
