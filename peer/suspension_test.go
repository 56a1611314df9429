package peer

import (
	"testing"
	"time"
)

// TestSuspensionSteps walks one peer's back-off through named instants:
// suspended after a failure, probed when it ends, doubling while probes
// fail, capped at maxBackoffFactor × first, reset by a success.
func TestSuspensionSteps(t *testing.T) {
	const ms = int64(time.Millisecond)
	s := newSuspension(100 * time.Millisecond)
	type step struct {
		name string
		at   int64  // ms
		do   string // "failed", "succeeded" or "" (only check allow)
		want bool   // allow(at) after do
	}
	steps := []step{
		{"fresh peer", 0, "", true},
		{"first failure suspends for 100ms", 1000, "failed", false},
		{"still suspended just before the end", 1099, "", false},
		{"probe allowed at the end", 1100, "", true},
		{"probe fails: 200ms", 1100, "failed", false},
		{"still suspended at 1299", 1299, "", false},
		{"probe allowed at 1300", 1300, "", true},
		{"probe fails: 400ms", 1300, "failed", false},
		{"allowed at 1700", 1700, "", true},
		{"fails: 800ms", 1700, "failed", false},
		{"fails: 1600ms", 2500, "failed", false},
		{"allowed at 4100", 4100, "", true},
		{"fails: capped at 2000ms, not 3200ms", 4100, "failed", false},
		{"suspended at 6099", 6099, "", false},
		{"allowed at 6100", 6100, "", true},
		{"fails again: still 2000ms", 6100, "failed", false},
		{"allowed at 8100", 8100, "", true},
		{"probe answered", 8100, "succeeded", true},
		{"next failure starts at 100ms again", 9000, "failed", false},
		{"allowed at 9100", 9100, "", true},
	}
	for _, st := range steps {
		switch st.do {
		case "failed":
			s.failed(st.at * ms)
		case "succeeded":
			s.succeeded()
		}
		if got := s.allow(st.at * ms); got != st.want {
			t.Fatalf("%s: allow(%dms) = %v, want %v", st.name, st.at, got, st.want)
		}
	}
}
