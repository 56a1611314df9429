package main

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"strings"
	"testing"
)

// TestRLQSAgainstLocalCluster plays six Envoy instances (two want 10/s,
// four 1000/s, under 600/s) on three real nodes, the streams spread over
// them so that most reports are forwarded to the bucket's owner, reporting
// every second; at 8 s two large and the two small swap demands. It
// checks the fair shares, the limit, and that the shift converges within
// three reports.
func TestRLQSAgainstLocalCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a local cluster")
	}
	t.Parallel()
	args := []string{"--api", "rlqs", "--local", "3", "--server-bin", serverBin(t), "--rlqs-interval", "1s",
		"--duration", "16s", "--rlqs-demand", "10,10,1000,1000,1000,1000", "--rlqs-shift", "8s:1000,1000,10,10,1000,1000",
		"--json", "--quiet"}
	var stdout, stderr bytes.Buffer
	if code := run(context.Background(), args, &stdout, &stderr); code != exitOK {
		t.Fatalf("loadtest %s: exit %d; stderr: %s", strings.Join(args, " "), code, stderr.String())
	}
	var r rlqsReport
	if err := json.Unmarshal(stdout.Bytes(), &r); err != nil {
		t.Fatalf("stdout is not a report: %v\n%s", err, stdout.String())
	}
	t.Logf("admitted ÷ limit per second %v; converged %.1fs; after the shift %.1fs (%d reports), peak %.3f",
		r.PerSecond, r.ConvergedS, r.ShiftConvS, r.ShiftConvR, r.ShiftPeak)
	if r.ConvergedS < 0 || r.ConvergedS > 5 {
		t.Fatalf("first convergence after %.1fs, want within 5 s", r.ConvergedS)
	}
	checkWindow(t, "steady", r.Steady, []float64{10, 10, 145, 145, 145, 145})
	if r.ShiftConvR < 0 || r.ShiftConvR > 3 {
		t.Errorf("the shift converged after %d reports (%.1fs), want within 3", r.ShiftConvR, r.ShiftConvS)
	}
	// While demand shifts, a second may carry the limit plus the bursts of
	// the new token buckets (Envoy starts each one full), within one TTL.
	if r.ShiftPeak > 1.5 {
		t.Errorf("peak admitted ÷ limit while the demand shifts = %.3f, want ≤ 1.5", r.ShiftPeak)
	}
	if r.AfterShift == nil {
		t.Fatal("no window after the shift")
	}
	checkWindow(t, "after the shift", *r.AfterShift, []float64{145, 145, 10, 10, 145, 145})
}

// checkWindow checks a window of the report: within the limit, the small
// instances satisfied, the large ones even (each within 10% of want).
func checkWindow(t *testing.T, name string, w window, want []float64) {
	t.Helper()
	if w.ToS-w.FromS < 2 {
		t.Errorf("%s: window of %d s, want at least 2", name, w.ToS-w.FromS)
		return
	}
	if w.AvgOverLimit > 1.02 || w.AvgOverLimit < 0.9 {
		t.Errorf("%s: admitted ÷ limit %.3f, want 0.9 to 1.02", name, w.AvgOverLimit)
	}
	if !w.SmallSatisfied || w.Jain < 0.99 {
		t.Errorf("%s: small satisfied %v, Jain %.4f; want true and ≥ 0.99", name, w.SmallSatisfied, w.Jain)
	}
	for i, got := range w.PerInstance {
		if math.Abs(got-want[i]) > 0.1*want[i] {
			t.Errorf("%s: instance %d admitted %.1f/s, want %.0f ± 10%%", name, i, got, want[i])
		}
	}
}

func TestRLQSFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string // "" = valid
	}{
		{[]string{"--api", "rlqs", "--targets", "a:1"}, ""},
		{[]string{"--api", "rlqs", "--targets", "a:1", "--rlqs-demand", "10,x"}, "--rlqs-demand"},
		{[]string{"--api", "rlqs", "--targets", "a:1", "--rlqs-shift", "5s:1,2"}, "2 demands for 6 instances"},
		{[]string{"--api", "rlqs", "--targets", "a:1", "--rlqs-interval", "1500ms"}, "whole seconds"},
		{[]string{"--api", "rlqs", "--targets", "a:1", "--mode", "accuracy"}, "no --mode"},
	} {
		_, err := parseFlags(tc.args, &bytes.Buffer{})
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("parseFlags(%q) = %v, want %q", tc.args, err, tc.want)
		}
	}
}

func TestMaxMinShares(t *testing.T) {
	got := maxMinShares(600, []float64{10, 1000, 10, 1000, 1000, 1000})
	for i, want := range []float64{10, 145, 10, 145, 145, 145} {
		if math.Abs(got[i]-want) > 1e-9 {
			t.Fatalf("maxMinShares(600, skew) = %v, want 10 for the small, 145 for the large", got)
		}
	}
}
