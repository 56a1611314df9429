package gossip

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"
)

// newRetrying returns a Membership with one seed and a 1 s join retry; its
// join loop is driven by a fake contact, never memberlist.
func newRetrying(t *testing.T) *Membership {
	t.Helper()
	m, err := New(Config{NodeName: "a", GRPCAddr: "127.0.0.9:8081", Seeds: []string{"127.0.0.9:7946"}, JoinRetry: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestJoinRetrySchedule runs the join retry loop in a synctest bubble: a
// seed that refuses three times is tried again every JoinRetry ±20 %, the
// fourth attempt joins, and the node reports joined.
func TestJoinRetrySchedule(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := newRetrying(t)
		var at []time.Duration
		start := time.Now()
		contact := func(_ context.Context, targets []string) (int, int, error) {
			at = append(at, time.Since(start))
			if len(at) <= 3 {
				return 0, len(targets), errors.New("connection refused")
			}
			return 1, len(targets), nil
		}
		if !m.joinSeeds(context.Background(), contact) {
			t.Fatal("joinSeeds gave up with a live context")
		}
		if len(at) != 4 || !m.Joined() {
			t.Fatalf("attempts %v, joined %v; want 4 attempts and joined", at, m.Joined())
		}
		if at[0] != 0 {
			t.Errorf("first attempt at %v, want at once", at[0])
		}
		for i := 1; i < len(at); i++ {
			if gap := at[i] - at[i-1]; gap < 800*time.Millisecond || gap > 1200*time.Millisecond {
				t.Errorf("attempt %d came %v after the one before, want 1 s ±20 %%", i+1, gap)
			}
		}
	})
}

// TestJoinAloneAtOnce: seeds that resolve to this node only (nothing tried,
// nothing failed) start a new cluster on the first attempt.
func TestJoinAloneAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := newRetrying(t)
		start := time.Now()
		attempts := 0
		contact := func(context.Context, []string) (int, int, error) { attempts++; return 0, 0, nil }
		if !m.joinSeeds(context.Background(), contact) || !m.Joined() {
			t.Fatal("a node whose seeds are itself did not start a cluster")
		}
		if attempts != 1 || time.Since(start) != 0 {
			t.Fatalf("%d attempts over %v, want 1 at once", attempts, time.Since(start))
		}
	})
}

// TestJoinStopsWithContext: while every attempt fails, cancelling the
// context ends the loop at once, unjoined.
func TestJoinStopsWithContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := newRetrying(t)
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(1400*time.Millisecond, cancel) // between the 2nd attempt (≤ 1.2 s) and the 3rd (≥ 1.6 s)
		start := time.Now()
		attempts := 0
		contact := func(_ context.Context, targets []string) (int, int, error) {
			attempts++
			return 0, len(targets), errors.New("connection refused")
		}
		if m.joinSeeds(ctx, contact) {
			t.Fatal("joinSeeds reported joined although every attempt failed")
		}
		if took := time.Since(start); took != 1400*time.Millisecond || attempts != 2 || m.Joined() {
			t.Fatalf("stopped after %v and %d attempts (joined %v), want at the cancel, 1.4 s, after 2 attempts", took, attempts, m.Joined())
		}
	})
}
