package main

import (
	"strings"
	"testing"
)

func TestParseCounter(t *testing.T) {
	t.Parallel()
	text := `# HELP process_cpu_seconds_total Total user and system CPU time spent in seconds.
# TYPE process_cpu_seconds_total counter
process_cpu_seconds_total_other 9
process_cpu_seconds_total 12.34
process_max_fds 1024
`
	got, err := parseCounter(strings.NewReader(text), cpuMetric)
	if err != nil || got != 12.34 {
		t.Errorf("parseCounter = %v, %v; want 12.34", got, err)
	}
	if _, err := parseCounter(strings.NewReader("go_goroutines 3\n"), cpuMetric); err == nil {
		t.Error("parseCounter without the metric succeeded")
	}
	if _, err := parseCounter(strings.NewReader("process_cpu_seconds_total x\n"), cpuMetric); err == nil {
		t.Error("parseCounter of a bad value succeeded")
	}
}

func TestMetricsURL(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"127.0.0.1:8080":              "http://127.0.0.1:8080/metrics",
		"https://node-1:9090/metrics": "https://node-1:9090/metrics",
	} {
		if got := metricsURL(in); got != want {
			t.Errorf("metricsURL(%q) = %q, want %q", in, got, want)
		}
	}
}
