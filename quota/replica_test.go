package quota

import (
	"testing"
	"time"
)

// TestReplicaCountsOldAssignments: a new owner that took the old owner's
// replica counts the assignments handed out there until their TTL ends.
func TestReplicaCountsOldAssignments(t *testing.T) {
	old, next := New(Config{Interval: time.Second}), New(Config{Interval: time.Second})
	report := func(tab *Table, at time.Duration, id string) Assignment {
		a, err := tab.Report(t0.Add(at), Report{Key: "k", Group: "g", Limit: 100, Instance: id, Allowed: 500, Elapsed: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	report(old, 0, "a")
	report(old, 0, "b")
	report(old, time.Second, "a")
	report(old, time.Second, "b")
	report(old, 2300*time.Millisecond, "a") // a's first 100/s has ended
	if a := report(old, 2300*time.Millisecond, "b"); a.Rate() != 50 {
		t.Fatalf("b on the old owner: %+v, want 50", a)
	}
	var states []BucketState
	old.Export(t0.Add(2300*time.Millisecond), func(s BucketState) { states = append(states, s) })
	if len(states) != 1 || len(states[0].Instances) != 2 {
		t.Fatalf("Export = %+v, want the bucket and its two instances", states)
	}
	now := t0.Add(3 * time.Second)
	if err := next.Import(now, states[0]); err != nil {
		t.Fatal(err)
	}
	if st := next.Stats(now)["g"]; st.Buckets != 0 {
		t.Fatalf("the replica counts in Stats: %+v, want it left out (its owner counts it)", st)
	}
	// A third instance arrives at the new owner: the old assignments (2.2 s
	// left at the export, counted from the import: until 5.2 s) leave
	// nothing free.
	if a := report(next, 3*time.Second, "c"); a.Rate() != 0 {
		t.Errorf("c on the new owner while the old assignments run: %+v, want 0", a)
	}
	if a := report(next, 5300*time.Millisecond, "c"); a.Rate() < 30 {
		t.Errorf("c once they ended: %+v, want its share", a)
	}
	// A replica of a bucket the node reports on itself is ignored.
	if err := next.Import(now, BucketState{Key: "k", Limit: 1}); err != nil {
		t.Fatal(err)
	}
	if st := next.Stats(t0.Add(5300 * time.Millisecond))["g"]; st.Instances == 0 {
		t.Errorf("a replica replaced a bucket reported on here: %+v", st)
	}
}

// TestImportMerges: the delta an owner sends before answering (one
// instance, ExportInstance) and its periodic full state merge in either
// order: a later assignment is not undone by an older full state.
func TestImportMerges(t *testing.T) {
	owner, backup := New(Config{Interval: time.Second}), New(Config{Interval: time.Second})
	report := func(at time.Duration, id string, demand uint64) {
		if _, err := owner.Report(t0.Add(at), Report{Key: "k", Group: "g", Limit: 100, Instance: id, Allowed: demand, Elapsed: time.Second, Settled: true}); err != nil {
			t.Fatal(err)
		}
	}
	report(0, "a", 40) // a gets 40
	var full []BucketState
	owner.Export(t0, func(s BucketState) { full = append(full, s) })
	report(time.Second, "b", 500) // b's first assignment, the other 60, after the full state
	delta, ok := owner.ExportInstance(t0.Add(time.Second), "k", "b")
	if !ok || len(delta.Instances) != 1 || len(delta.Instances[0].Leases) != 1 {
		t.Fatalf("ExportInstance(k, b) = %+v, %v; want b and its assignment", delta, ok)
	}
	if _, ok := owner.ExportInstance(t0, "k", "nobody"); ok {
		t.Error("ExportInstance of an instance the bucket does not hold: ok, want not")
	}
	at := t0.Add(time.Second)
	if err := backup.Import(at, delta); err != nil {
		t.Fatal(err)
	}
	if err := backup.Import(at, full[0]); err != nil { // the older full state, late
		t.Fatal(err)
	}
	// The backup takes over: it counts a's and b's assignments.
	a, err := backup.Report(at, Report{Key: "k", Group: "g", Limit: 100, Instance: "c", Settled: true})
	if err != nil {
		t.Fatal(err)
	}
	backup.mu.Lock()
	counted := 0.0
	for _, in := range backup.buckets["k"].instances {
		counted += in.outstanding(at)
	}
	backup.mu.Unlock()
	if want := 100.0; counted > want+1e-9 || counted < want-a.Rate()-1e-9 {
		t.Errorf("the backup counts %v in all, with c's %v: want a's and b's (all of the limit) and nothing for c", counted, a.Rate())
	}
	if !a.None && a.Rate() != 0 {
		t.Errorf("c at the backup while a's and b's run: %+v, want nothing", a)
	}
}

// TestImportIntoOwnBucket: an earlier owner's state reaching the new
// owner (it reports on the bucket already) adds the assignments it lists,
// counted until they end; the new owner's own instances keep their state.
func TestImportIntoOwnBucket(t *testing.T) {
	tab := New(Config{Interval: time.Second})
	if _, err := tab.Report(t0, Report{Key: "k", Group: "g", Limit: 100, Instance: "a", Settled: true}); err != nil {
		t.Fatal(err)
	}
	if err := tab.Import(t0, BucketState{Key: "k", Group: "g", Limit: 100, Instances: []InstanceState{
		{ID: "x", Demand: 60, Leases: []LeaseState{{Rate: 60, Left: 1500 * time.Millisecond}}}}}); err != nil {
		t.Fatal(err)
	}
	a, err := tab.Report(t0.Add(time.Second+Slack), Report{Key: "k", Group: "g", Limit: 100, Instance: "a", Allowed: 1000, Elapsed: time.Second, Settled: true})
	if err != nil || a.Rate() > 40 {
		t.Fatalf("a while x's imported 60 runs: %+v, %v; want at most 40", a, err)
	}
	a, err = tab.Report(t0.Add(3*time.Second), Report{Key: "k", Group: "g", Limit: 100, Instance: "a", Allowed: 1000, Elapsed: time.Second, Settled: true})
	if err != nil || a.Rate() < 50 {
		t.Errorf("a after x's assignment ended: %+v, %v; want its share", a, err)
	}
}
