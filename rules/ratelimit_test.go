package rules

import (
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/shardlimiter/shardlimiter/limit"
)

// TestRateLimits: several limits on one descriptor, with algorithms and
// burst, generated names, and replaces from any of them.
func TestRateLimits(t *testing.T) {
	t.Parallel()
	s := mustParse(t, `
domain: api
descriptors:
  - key: account
    shadow_mode: true
    rate_limits:
      - {unit: second, requests_per_unit: 10, algorithm: TOKEN_BUCKET, burst: 20}
      - {unit: hour, requests_per_unit: 1000, name: hourly, replaces: [{name: old}]}
      - {unit: month, requests_per_unit: 100000}
`)
	m, ok := s.Match("api", e("account", "42"))
	if !ok || len(m.Limits) != 3 || !m.Shadow || !slices.Equal(m.Replaces, []string{"old"}) {
		t.Fatalf("Match = %+v, %v", m, ok)
	}
	const d = 24 * time.Hour
	wantLimits := []Limit{
		{Name: "api.account#0", Unit: "second", Rule: limit.Rule{Algorithm: limit.TokenBucket, Limit: 10, Period: time.Second, Burst: 20}},
		{Name: "hourly", Named: true, Unit: "hour", Rule: limit.Rule{Algorithm: limit.FixedWindow, Limit: 1000, Period: time.Hour}},
		{Name: "api.account#2", Unit: "month", Rule: limit.Rule{Algorithm: limit.FixedWindow, Limit: 100000, Period: 31 * d, Calendar: limit.CalendarMonth}},
	}
	if !slices.Equal(m.Limits, wantLimits) {
		t.Errorf("Limits = %+v\nwant %+v", m.Limits, wantLimits)
	}
	for _, name := range []string{"api.account#0", "hourly", "api.account#2"} {
		if r, ok := s.ByName(name); !ok || r.Limit == 0 {
			t.Errorf("ByName(%q) = %+v, %v", name, r, ok)
		}
	}
}

// TestCalendarUnits: week, month and year are calendar windows under
// FIXED_WINDOW and envoyproxy/ratelimit's 7, 30 and 365 days otherwise.
func TestCalendarUnits(t *testing.T) {
	t.Parallel()
	s := mustParse(t, `
domain: cal
descriptors:
  - key: w
    rate_limit: {unit: week, requests_per_unit: 1}
  - key: m
    rate_limit: {unit: Month, requests_per_unit: 1}
  - key: y
    rate_limit: {unit: YEAR, requests_per_unit: 1}
  - key: tm
    rate_limit: {unit: month, requests_per_unit: 1, algorithm: token_bucket}
  - key: sy
    rate_limit: {unit: year, requests_per_unit: 1, algorithm: SLIDING_WINDOW}
`)
	const d = 24 * time.Hour
	for _, tt := range []struct {
		key    string
		period time.Duration
		cal    limit.Calendar
		unit   string
	}{
		{"w", 7 * d, limit.CalendarWeek, "week"},
		{"m", 31 * d, limit.CalendarMonth, "month"},
		{"y", 366 * d, limit.CalendarYear, "year"},
		{"tm", 30 * d, limit.NoCalendar, "month"},
		{"sy", 365 * d, limit.NoCalendar, "year"},
	} {
		m, ok := s.Match("cal", e(tt.key, "v"))
		if !ok {
			t.Fatalf("Match(%s): no rule", tt.key)
		}
		l := m.Limits[0]
		if l.Rule.Period != tt.period || l.Rule.Calendar != tt.cal || l.Unit != tt.unit {
			t.Errorf("%s: period %v calendar %v unit %q, want %v %v %q", tt.key, l.Rule.Period, l.Rule.Calendar, l.Unit, tt.period, tt.cal, tt.unit)
		}
		if err := l.Rule.Validate(); err != nil {
			t.Errorf("%s: %v", tt.key, err)
		}
	}
}

// TestMetadata: a descriptor's metadata reaches its Match as written, with
// numbers as JSON numbers; a descriptor without it has none.
func TestMetadata(t *testing.T) {
	t.Parallel()
	s := mustParse(t, `
domain: quota
descriptors:
  - key: service
    value: service_1
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
    metadata:
      service_with_quota: {name: service_1, weight: 2, tags: [a, 1.5, true, null]}
  - key: service
    value: service_2
    rate_limit: {unit: minute, requests_per_unit: 2}
`)
	m, ok := s.Match("quota", e("service", "service_1"))
	want := map[string]any{"service_with_quota": map[string]any{
		"name": "service_1", "weight": 2.0, "tags": []any{"a", 1.5, true, nil}}}
	if !ok || !reflect.DeepEqual(m.Metadata, want) {
		t.Errorf("Match(service_1).Metadata = %#v, %v; want %#v", m.Metadata, ok, want)
	}
	if m, ok := s.Match("quota", e("service", "service_2")); !ok || m.Metadata != nil {
		t.Errorf("Match(service_2).Metadata = %#v, %v; want nil", m.Metadata, ok)
	}
}
