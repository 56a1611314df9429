package rules

import (
	"slices"
	"testing"
)

// detailed_metric reaches Match.Detailed; EachLimit lists every limit
// with its domain, generated names being the descriptor path.
func TestDetailedAndEachLimit(t *testing.T) {
	t.Parallel()
	s := mustParse(t, `
domain: d
descriptors:
  - key: key1
    detailed_metric: true
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: key1
    value: value1
    rate_limit: {name: named, unit: second, requests_per_unit: 20}
    descriptors:
      - key: key2
        rate_limits:
          - {unit: hour, requests_per_unit: 5}
          - {unit: day, requests_per_unit: 50}
  - key: free
    rate_limit: {unlimited: true}
`)
	if m, ok := s.Match("d", []Entry{{"key1", "x"}}); !ok || !m.Detailed {
		t.Errorf("Match(key1=x) = %+v, %v, want detailed", m, ok)
	}
	if m, ok := s.Match("d", []Entry{{"key1", "value1"}}); !ok || m.Detailed {
		t.Errorf("Match(key1=value1) = %+v, %v, want not detailed", m, ok)
	}
	var got []string
	s.EachLimit(func(domain string, l Limit) { got = append(got, domain+" "+l.Name) })
	want := []string{"d d.key1", "d named", "d d.key1_value1.key2#0", "d d.key1_value1.key2#1"}
	if !slices.Equal(got, want) {
		t.Errorf("EachLimit = %q, want %q", got, want)
	}
}
