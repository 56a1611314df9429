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
