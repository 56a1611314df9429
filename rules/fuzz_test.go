package rules

import (
	"errors"
	"testing"
)

// FuzzParse: Parse never panics; it returns a Set or a *ConfigError, and
// a Set answers Match, ByName, Version and MarshalJSON.
func FuzzParse(f *testing.F) {
	f.Add([]byte(basicYAML))
	f.Add([]byte("domain: d\ndescriptors:\n  - {key: a, value: 'x*y*', share_threshold: true, rate_limits: [{unit: week, requests_per_unit: 3}]}\n"))
	f.Add([]byte("domain: d\n---\ndomain: e\ndescriptors: [{key: k, rate_limit: &a {unit: second, requests_per_unit: 1}}, {key: j, rate_limit: *a}]\n"))
	f.Add([]byte("domain: d\ndescriptors:\n  - key: a\n    rate_limit: {<<: [{unit: day}], requests_per_unit: 0}\n"))
	f.Add([]byte("a: &a [*a]\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := Parse("f.yaml", data)
		if err != nil {
			var ce *ConfigError
			if !errors.As(err, &ce) {
				t.Fatalf("Parse error %T %v is not a *ConfigError", err, err)
			}
			return
		}
		for _, d := range s.loaded {
			s.Match(d.name, []Entry{{"a", "x"}, {"k", ""}})
			for _, n := range d.top.list {
				s.Match(d.name, []Entry{{n.key, n.value}})
			}
		}
		s.ByName("x")
		if _, err := s.MarshalJSON(); err != nil {
			t.Fatal(err)
		}
		if s.Version() == "" {
			t.Fatal("no version")
		}
	})
}
