package rules

import (
	"slices"
	"testing"
)

// want is what a descriptor should match: nothing (zero want with
// none set), or a rule with these properties.
type want struct {
	none      bool
	rpu       int64 // requests_per_unit of the first limit
	unit      string
	name      string // "" = do not check
	unlimited bool
	shadow    bool
	replaces  []string
}

type query struct {
	domain  string // "" = the file's domain
	entries []Entry
	want    want
}

func e(kv ...string) []Entry {
	var es []Entry
	for i := 0; i+1 < len(kv); i += 2 {
		es = append(es, Entry{kv[i], kv[i+1]})
	}
	return es
}

func mustParse(t *testing.T, yaml string) *Set {
	t.Helper()
	s, err := Parse("test.yaml", []byte(yaml))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	return s
}

func checkQueries(t *testing.T, s *Set, domain string, qs []query) {
	t.Helper()
	for _, q := range qs {
		d := cmpOr(q.domain, domain)
		m, ok := s.Match(d, q.entries)
		w := q.want
		if w.none {
			if ok {
				t.Errorf("Match(%q, %v) = %+v, want no rule", d, q.entries, m)
			}
			continue
		}
		if !ok {
			t.Errorf("Match(%q, %v) found no rule, want %+v", d, q.entries, w)
			continue
		}
		if m.Unlimited != w.unlimited || m.Shadow != w.shadow || !slices.Equal(m.Replaces, w.replaces) {
			t.Errorf("Match(%q, %v) = %+v, want %+v", d, q.entries, m, w)
		}
		if w.unlimited {
			if len(m.Limits) != 0 {
				t.Errorf("Match(%q, %v): unlimited with limits %+v", d, q.entries, m.Limits)
			}
			continue
		}
		if len(m.Limits) == 0 {
			t.Errorf("Match(%q, %v) has no limits", d, q.entries)
			continue
		}
		l := m.Limits[0]
		if l.Rule.Limit != w.rpu || l.Unit != w.unit || w.name != "" && l.Name != w.name {
			t.Errorf("Match(%q, %v) limit = %+v, want %d per %s name %q", d, q.entries, l, w.rpu, w.unit, w.name)
		}
	}
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

var none = want{none: true}

func key(t *testing.T, s *Set, domain string, es []Entry) string {
	t.Helper()
	m, ok := s.Match(domain, es)
	if !ok {
		t.Fatalf("Match(%q, %v): no rule", domain, es)
	}
	return m.Key
}
