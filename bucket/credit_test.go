package bucket

import (
	"testing"
	"time"

	"github.com/shardlimiter/shardlimiter/limit"
	"github.com/shardlimiter/shardlimiter/table"
)

// A lease's grant is a take of its hits (peer/lease.go); what the lessee
// did not use comes back through Credit. The steps run at named instants
// on one key of capacity 10 refilling one hit per 100 ms.
func TestCreditStepTable(t *testing.T) {
	const t0 = int64(1_000) * int64(time.Second)
	r := limit.Rule{Limit: 10, Period: time.Second}
	tb := NewTokenBucket(table.Config{})
	const key = "k"
	steps := []struct {
		name   string
		at     int64
		credit int64 // hits to credit; 0 takes take instead
		take   int64
		want   int64 // hits credited, or remaining after the take
	}{
		{"grant of 6 debits the key", t0, 0, 6, 4},
		{"the owner takes what is left", t0, 0, 4, 0},
		{"nothing more fits", t0, 0, 1, 0},
		{"the lessee gives back 3 of its 6", t0, 3, 0, 3},
		{"those 3 can be taken again", t0, 0, 3, 0},
		{"a credit never fills past capacity", t0 + int64(900*time.Millisecond), 50, 0, 1},
		{"a full bucket takes no credit", t0 + int64(2*time.Second), 5, 0, 0},
	}
	for _, s := range steps {
		if s.credit > 0 {
			if got := tb.Credit(key, s.at, r, s.credit); got != s.want {
				t.Fatalf("%s: credited %d, want %d", s.name, got, s.want)
			}
			continue
		}
		d := tb.Take(key, s.at, r, s.take)
		if s.name == "nothing more fits" {
			if d.Allowed {
				t.Fatalf("%s: admitted", s.name)
			}
			continue
		}
		if !d.Allowed || d.Remaining != s.want {
			t.Fatalf("%s: %+v, want admitted with %d remaining", s.name, d, s.want)
		}
	}
	// After the full credit the key is full: exactly capacity fits, and
	// no more.
	at := t0 + int64(2*time.Second)
	if d := tb.Take(key, at, r, 10); !d.Allowed {
		t.Fatalf("a full bucket refused its capacity: %+v", d)
	}
	if d := tb.Take(key, at, r, 1); d.Allowed {
		t.Fatalf("admitted past capacity after credits: %+v", d)
	}
}

// A credit under a rule other than the key's, under a warm-up, or for a
// key not held gives nothing back.
func TestCreditRefused(t *testing.T) {
	const t0 = int64(1_000) * int64(time.Second)
	r := limit.Rule{Limit: 10, Period: time.Second}
	tb := NewTokenBucket(table.Config{})
	tb.Take("k", t0, r, 10)
	other := r
	other.Limit = 20
	warm := r
	warm.Warmup = time.Second
	for name, c := range map[string]func() int64{
		"other rule": func() int64 { return tb.Credit("k", t0, other, 5) },
		"warm-up":    func() int64 { return tb.Credit("k", t0, warm, 5) },
		"absent key": func() int64 { return tb.Credit("nobody", t0, r, 5) },
		"zero hits":  func() int64 { return tb.Credit("k", t0, r, 0) },
	} {
		if got := c(); got != 0 {
			t.Errorf("%s: credited %d, want 0", name, got)
		}
	}
	if d := tb.Take("k", t0, r, 1); d.Allowed {
		t.Fatalf("a refused credit freed a hit: %+v", d)
	}
}

// The debit of a grant is part of the key's exported state: a new owner
// that imports it admits only what was left after the grant.
func TestGrantDebitTravelsWithTheState(t *testing.T) {
	const t0 = int64(1_000) * int64(time.Second)
	r := limit.Rule{Limit: 10, Period: time.Second}
	old := NewTokenBucket(table.Config{})
	if d := old.Take("k", t0, r, 7); !d.Allowed { // a grant of 7
		t.Fatalf("grant refused: %+v", d)
	}
	st, ok := old.Export("k", t0)
	if !ok {
		t.Fatal("a debited key was not exported")
	}
	next := NewTokenBucket(table.Config{})
	if err := next.Import("k", st, t0, true); err != nil {
		t.Fatal(err)
	}
	if d := next.Take("k", t0, r, 4); d.Allowed {
		t.Fatalf("the new owner admitted 4 of the 3 left after the grant: %+v", d)
	}
	if d := next.Take("k", t0, r, 3); !d.Allowed {
		t.Fatalf("the new owner refused the 3 left: %+v", d)
	}
}
