package quota

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// sim plays instances that report every second on one bucket, each
// spending min(demand, assignment) and counting the rest as denied.
type sim struct {
	t       *testing.T
	tab     *Table
	limit   float64
	demands []float64
	got     []Assignment
	now     time.Time
	reports int
}

func newSim(t *testing.T, limit float64, demands ...float64) *sim {
	return &sim{t: t, tab: New(Config{Interval: time.Second}), limit: limit, demands: demands,
		got: make([]Assignment, len(demands)), now: t0}
}

// round has every instance report once, 100 ms apart, and checks that
// the outstanding assignments never exceed the limit.
func (s *sim) round() {
	s.t.Helper()
	for i, d := range s.demands {
		s.now = s.now.Add(time.Second / time.Duration(len(s.demands)))
		r := Report{Key: "k", Group: "edge/tenant", Limit: s.limit, Instance: fmt.Sprint("i", i), Elapsed: time.Second}
		if s.reports == 0 {
			r.Elapsed = 0
		}
		r.Allowed = uint64(min(d, s.got[i].Rate()))
		r.Denied = uint64(d) - r.Allowed
		a, err := s.tab.Report(s.now, r)
		if err != nil {
			s.t.Fatalf("Report(%+v) = %v", r, err)
		}
		s.got[i] = a
		if st := s.tab.Stats(s.now)["edge/tenant"]; st.Assigned > s.limit+1e-9 {
			s.t.Fatalf("report %d of i%d: outstanding assignments %v > limit %v", s.reports, i, st.Assigned, s.limit)
		}
	}
	s.reports++
}

// converged reports whether every instance's assignment is within 10% of
// want (or 1 req/s).
func (s *sim) converged(want []float64) bool {
	for i, w := range want {
		if math.Abs(s.got[i].Rate()-w) > max(0.1*w, 1) {
			return false
		}
	}
	return true
}

func (s *sim) rates() []float64 {
	r := make([]float64, len(s.got))
	for i, a := range s.got {
		r[i] = a.Rate()
	}
	return r
}

func TestTableSkewConvergesAndShifts(t *testing.T) {
	s := newSim(t, 600, 10, 10, 1000, 1000, 1000, 1000)
	want := []float64{10, 10, 145, 145, 145, 145}
	for range 6 {
		s.round()
	}
	if !s.converged(want) {
		t.Fatalf("after 6 reports: rates %v, want %v", s.rates(), want)
	}
	// Shift: two large instances go quiet (10/s), the small ones grow.
	s.demands = []float64{1000, 1000, 10, 10, 1000, 1000}
	want = []float64{145, 145, 10, 10, 145, 145}
	n := 0
	for ; n < 10 && !s.converged(want); n++ {
		s.round()
	}
	if n > 3 || !s.converged(want) {
		t.Errorf("after the shift: %d reports to converge, rates %v, want %v within 3", n, s.rates(), want)
	}
	t.Logf("shift converged in %d reports", n)
}

func TestTableLeaseCountsUntilTTL(t *testing.T) {
	tab := New(Config{Interval: time.Second}) // TTL 2 s
	r := func(at time.Duration, id string, demand uint64) Assignment {
		a, err := tab.Report(t0.Add(at), Report{Key: "k", Limit: 100, Instance: id, Allowed: demand, Elapsed: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	// A new bucket learns for an interval first: nothing assigned, a retry
	// when learning ends.
	if a := r(-time.Second-Slack, "a", 1000); a.Rate() != 0 || a.Retry != time.Second+Slack {
		t.Fatalf("first report: %+v, want nothing and a retry in 1.2 s", a)
	}
	if a := r(0, "a", 1000); a.Rate() != 100 {
		t.Fatalf("only instance: %+v, want the whole limit", a)
	}
	// b arrives: a's lease of 100 runs until 2 s, nothing is free for b.
	if a := r(500*time.Millisecond, "b", 1000); a.Rate() != 0 {
		t.Fatalf("b at 0.5 s: %+v, want 0 (a holds the limit until 2 s)", a)
	}
	if a := r(time.Second, "a", 1000); a.Rate() != 50 {
		t.Fatalf("a at 1 s: %+v, want its fair half, 50", a)
	}
	if a := r(1500*time.Millisecond, "b", 1000); a.Rate() != 0 || a.Retry != 700*time.Millisecond {
		t.Fatalf("b at 1.5 s: %+v, want 0 and a retry in 0.7 s (a's old 100 runs until 2 s plus the slack)", a)
	}
	if a := r(2500*time.Millisecond, "b", 1000); a.Rate() != 50 {
		t.Fatalf("b at 2.5 s: %+v, want 50", a)
	}
	if a := r(2500*time.Millisecond, "c", 0); a.TTL != 2*time.Second {
		t.Fatalf("TTL = %v, want 2 s", a.TTL)
	}
}

func TestTableSweepAbandons(t *testing.T) {
	tab := New(Config{Interval: time.Second, MaxBuckets: 1})
	if _, err := tab.Report(t0, Report{Key: "k", Limit: 10, Instance: "a"}); err != nil {
		t.Fatal(err)
	}
	if _, err := tab.Report(t0, Report{Key: "other", Limit: 10, Instance: "a"}); err != ErrFull {
		t.Fatalf("second bucket over MaxBuckets 1: err = %v, want ErrFull", err)
	}
	if n := tab.Sweep(t0.Add(time.Second)); n != 0 {
		t.Fatalf("Sweep within the TTL dropped %d buckets", n)
	}
	if n := tab.Sweep(t0.Add(2*time.Second + Slack)); n != 1 {
		t.Fatalf("Sweep after the TTL dropped %d buckets, want 1", n)
	}
}

func TestQuantize(t *testing.T) {
	for _, tc := range []struct {
		rate         float64
		tokens, fill int
	}{
		{145, 145, 1}, {0.5, 1, 2}, {1.67, 8, 5}, {0, 0, 1}, {100.9, 100, 1},
	} {
		a := quantize(tc.rate, time.Second)
		if int(a.Tokens) != tc.tokens || a.Fill != time.Duration(tc.fill)*time.Second {
			t.Errorf("quantize(%v) = %+v, want %d tokens every %d s", tc.rate, a, tc.tokens, tc.fill)
		}
		if a.Rate() > tc.rate {
			t.Errorf("quantize(%v) rate %v exceeds it", tc.rate, a.Rate())
		}
	}
}

// TestTableNeverOverLimit reports random demands from random instances at
// random times: the assignments that may be in use never sum over the
// limit, whatever the order.
func TestTableNeverOverLimit(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for run := range 20 {
		tab := New(Config{Interval: time.Second})
		limit := float64(1 + rng.IntN(1000))
		now := t0
		for step := range 500 {
			now = now.Add(time.Duration(rng.IntN(400)) * time.Millisecond)
			id := fmt.Sprint("i", rng.IntN(8))
			r := Report{Key: "k", Group: "g", Limit: limit, Instance: id,
				Allowed: uint64(rng.IntN(2000)), Denied: uint64(rng.IntN(2000)), Elapsed: time.Duration(rng.IntN(3)) * time.Second}
			if _, err := tab.Report(now, r); err != nil {
				t.Fatal(err)
			}
			if st := tab.Stats(now)["g"]; st.Assigned > limit+1e-9 {
				t.Fatalf("run %d step %d: outstanding %v > limit %v", run, step, st.Assigned, limit)
			}
			if rng.IntN(50) == 0 {
				tab.Sweep(now)
			}
		}
	}
}
