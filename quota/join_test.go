package quota

import (
	"testing"
	"time"
)

// envoy is one instance as Envoy runs it: the assignments it received,
// each usable until its TTL ends.
type envoy struct {
	id     string
	demand float64
	got    []lease // every assignment received; the last is the one it holds
}

// holds is the instance's last assignment and the time left of it at now.
func (e *envoy) holds(now time.Time) (float64, time.Duration) {
	if len(e.got) == 0 || e.got[len(e.got)-1].live(now) == 0 {
		return 0, 0
	}
	l := e.got[len(e.got)-1]
	return l.rate, l.until.Sub(now)
}

// inUse is the most the instances may be spending at now: for each, the
// largest of its assignments still within its TTL.
func inUse(now time.Time, es []*envoy) float64 {
	sum := 0.0
	for _, e := range es {
		m := 0.0
		for _, l := range e.got {
			m = max(m, l.live(now))
		}
		sum += m
	}
	return sum
}

// play has every instance report once to tab, 250 ms apart, from *now,
// telling what it holds; it checks every 50 ms that the assignments in
// use stay within limit.
func play(t *testing.T, tab *Table, now *time.Time, limit float64, es []*envoy) {
	t.Helper()
	for _, e := range es {
		for range 5 {
			*now = now.Add(50 * time.Millisecond)
			if u := inUse(*now, es); u > limit+1e-9 {
				t.Fatalf("at %v: assignments in use sum to %v > limit %v", now.Sub(t0), u, limit)
			}
		}
		rate, left := e.holds(*now)
		r := Report{Key: "k", Group: "g", Limit: limit, Instance: e.id, Elapsed: time.Second,
			Allowed: uint64(min(e.demand, rate)), Denied: uint64(max(e.demand-rate, 0)), Held: rate, HeldLeft: left}
		a, err := tab.Report(*now, r)
		if err != nil {
			t.Fatal(err)
		}
		if !a.None {
			e.got = append(e.got, lease{rate: a.Rate(), until: now.Add(a.TTL)})
		}
		if u := inUse(*now, es); u > limit+1e-9 {
			t.Fatalf("at %v, %s got %+v: assignments in use sum to %v > limit %v", now.Sub(t0), e.id, a, u, limit)
		}
	}
}

// TestJoinNeverOverLimit moves a bucket to a fresh owner (a join: no
// replica) while its instances hold the old owner's assignments, and a
// new instance arrives: the assignments in use never sum over the limit,
// and the shares converge to the fair shares after learning.
func TestJoinNeverOverLimit(t *testing.T) {
	const limit = 100
	es := []*envoy{{id: "a", demand: 100}, {id: "b", demand: 50}, {id: "c", demand: 10}}
	old, now := New(Config{Interval: time.Second}), t0
	for range 8 {
		play(t, old, &now, limit, es)
	}
	for i, want := range []float64{45, 45, 10} {
		if r, _ := es[i].holds(now); r < want-1 || r > want+1 {
			t.Fatalf("before the join: %s holds %v, want about %v", es[i].id, r, want)
		}
	}
	// The join: a fresh owner, and a new instance n reporting first.
	fresh := New(Config{Interval: time.Second})
	es = append([]*envoy{{id: "n", demand: 100}}, es...)
	play(t, fresh, &now, limit, es)
	if r, _ := es[0].holds(now); r != 0 {
		t.Fatalf("n during learning: holds %v, want nothing (the others hold the limit)", r)
	}
	for range 8 {
		play(t, fresh, &now, limit, es)
	}
	for i, want := range []float64{30, 30, 30, 10} {
		if r, _ := es[i].holds(now); r < want-1 || r > want+1 {
			t.Errorf("after learning: %s holds %v, want its fair share %v", es[i].id, r, want)
		}
	}
}

// TestHeldAssignmentCounted: an assignment an instance reports holding,
// unknown to the owner, counts against the limit until it ends.
func TestHeldAssignmentCounted(t *testing.T) {
	tab := New(Config{Interval: time.Second})
	report := func(at time.Duration, r Report) Assignment {
		r.Key, r.Group, r.Limit = "k", "g", 100
		a, err := tab.Report(t0.Add(at), r)
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	report(0, Report{Instance: "a"})
	learnt := time.Second + Slack
	report(learnt, Report{Instance: "a", Allowed: 10, Elapsed: time.Second}) // a gets 10
	x := report(learnt, Report{Instance: "x", Allowed: 5, Elapsed: time.Second, Held: 60, HeldLeft: 1500 * time.Millisecond})
	if x.Rate() > 5 {
		t.Fatalf("x wants 5/s: got %+v", x)
	}
	if st := tab.Stats(t0.Add(learnt))["g"]; st.Assigned != 70 {
		t.Errorf("assigned = %v, want 70 (a's 10 and x's held 60)", st.Assigned)
	}
	if y := report(learnt, Report{Instance: "y", Allowed: 1000, Elapsed: time.Second}); y.Rate() > 30 {
		t.Errorf("y while x's held 60 runs: %+v, want at most 30", y)
	}
	if y := report(learnt+1500*time.Millisecond, Report{Instance: "y", Allowed: 1000, Elapsed: time.Second}); y.Rate() < 80 {
		t.Errorf("y after x's held assignment ended: %+v, want about 85", y)
	}
}

// TestNewBucketFirstAssignmentAfterAnInterval: a bucket new to its owner
// learns for an interval (plus Slack) and then assigns.
func TestNewBucketFirstAssignmentAfterAnInterval(t *testing.T) {
	tab := New(Config{Interval: 5 * time.Second})
	r := Report{Key: "k", Group: "g", Limit: 100, Instance: "a"}
	a, err := tab.Report(t0, r)
	if err != nil || !a.None || a.Retry != 5*time.Second+Slack {
		t.Fatalf("first report: %+v, %v; want no assignment and a retry in 5.2 s", a, err)
	}
	if a, _ := tab.Report(t0.Add(5*time.Second), r); !a.None {
		t.Fatalf("report at 5 s, still learning: %+v, want no assignment", a)
	}
	if a, _ := tab.Report(t0.Add(a.Retry), r); a.None || a.Rate() != 50 {
		t.Fatalf("report when learning ends: %+v, want half of the limit (demand unknown)", a)
	}
}

// TestReplicaDoesNotEndLearning: an imported replica seeds the leases,
// but the new owner still learns what instances hold.
func TestReplicaDoesNotEndLearning(t *testing.T) {
	tab := New(Config{Interval: time.Second})
	if err := tab.Import(t0, BucketState{Key: "k", Group: "g", Limit: 100, Instances: []InstanceState{
		{ID: "a", Demand: 100, Leases: []LeaseState{{Rate: 40, Left: time.Second}}}}}); err != nil {
		t.Fatal(err)
	}
	a, err := tab.Report(t0, Report{Key: "k", Group: "g", Limit: 100, Instance: "b", Elapsed: time.Second, Allowed: 100, Held: 60, HeldLeft: time.Second})
	if err != nil || a.Rate() != 60 || a.Retry != time.Second+Slack {
		t.Fatalf("b holding 60 after the change: %+v, %v; want 60 kept, a retry when learning ends", a, err)
	}
	if st := tab.Stats(t0)["g"]; st.Assigned != 100 {
		t.Errorf("assigned = %v, want 100 (a's replicated 40, b's 60)", st.Assigned)
	}
}

// TestSettledNewBucketAssignedAtOnce: on a ring that has not changed for an
// assignment's life a bucket new here is new everywhere: its first report
// gets a share, no learning; a replica still learns.
func TestSettledNewBucketAssignedAtOnce(t *testing.T) {
	tab := New(Config{Interval: 5 * time.Second})
	a, err := tab.Report(t0, Report{Key: "k", Group: "g", Limit: 100, Instance: "a", Settled: true})
	if err != nil || a.None || a.Rate() != 50 {
		t.Fatalf("first report on a settled ring: %+v, %v; want half of the limit at once", a, err)
	}
	if err := tab.Import(t0, BucketState{Key: "r", Group: "g", Limit: 100, Instances: []InstanceState{
		{ID: "a", Demand: 100, Leases: []LeaseState{{Rate: 40, Left: time.Second}}}}}); err != nil {
		t.Fatal(err)
	}
	if a, _ := tab.Report(t0, Report{Key: "r", Group: "g", Limit: 100, Instance: "b", Settled: true}); !a.None {
		t.Fatalf("a replicated bucket's first report here: %+v, want learning (no assignment)", a)
	}
}

// TestLearnUntil: a bucket new here learns until LearnUntil when that is
// later than an interval (a node that started less than an assignment's
// life ago: assignments from before a restart of every node may be in
// use), and the retry says when.
func TestLearnUntil(t *testing.T) {
	tab := New(Config{Interval: time.Second})
	until := t0.Add(2*time.Second + Slack)
	r := Report{Key: "k", Group: "g", Limit: 100, Instance: "a", LearnUntil: until}
	if a, err := tab.Report(t0, r); err != nil || !a.None || a.Retry != until.Sub(t0) {
		t.Fatalf("first report: %+v, %v; want nothing, a retry at LearnUntil", a, err)
	}
	if a, _ := tab.Report(t0.Add(2*time.Second), r); !a.None {
		t.Fatalf("report at 2 s, after an interval but before LearnUntil: %+v, want nothing", a)
	}
	if a, _ := tab.Report(until, r); a.None || a.Rate() != 50 {
		t.Fatalf("report at LearnUntil: %+v, want half of the limit", a)
	}
}

// TestLearningRenewsItsOwnHold: while a bucket learns for longer than an
// interval (a restarted owner), an instance whose held assignment this
// owner renewed reports again as that hold ends, telling nothing held: it
// keeps the rate, not nothing until learning ends.
func TestLearningRenewsItsOwnHold(t *testing.T) {
	tab := New(Config{Interval: 5 * time.Second})
	r := Report{Key: "k", Group: "g", Limit: 100, Instance: "a", Elapsed: 5 * time.Second, Allowed: 300,
		LearnUntil: t0.Add(10*time.Second + Slack)}
	first := r
	first.Held, first.HeldLeft = 60, time.Second
	if a, err := tab.Report(t0, first); err != nil || a.Rate() != 60 {
		t.Fatalf("a holding 60 on a restarted owner: %+v, %v; want 60 kept", a, err)
	}
	if a, err := tab.Report(t0.Add(5*time.Second), r); err != nil || a.Rate() != 60 || a.None {
		t.Fatalf("a's next report as its hold ends, still learning: %+v, %v; want 60 kept", a, err)
	}
	if st := tab.Stats(t0.Add(5 * time.Second))["g"]; st.Assigned != 60 {
		t.Errorf("assigned = %v, want 60 (one hold, renewed)", st.Assigned)
	}
	other := Report{Key: "k", Group: "g", Limit: 100, Instance: "b", Elapsed: 5 * time.Second, Allowed: 300}
	if a, _ := tab.Report(t0.Add(5*time.Second), other); !a.None {
		t.Fatalf("b holding nothing while learning: %+v, want nothing", a)
	}
}
