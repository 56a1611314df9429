package peer

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/shardlimiter/shardlimiter/limit"
)

// TestIdleNodeRunsNoTimer: a node with nothing to do runs no periodic work.
// Its sweeper sleeps while the tables are empty and its replicator while
// no key changed; each wakes when there is work and goes back to sleep
// after it. Every sweep and every replication round reads Config.Now, so
// counting those reads observes them (a check reads it too).
func TestIdleNodeRunsNoTimer(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		var reads atomic.Int64
		ctx, n := runCountingClock(t, Config{ReplicationInterval: 100 * time.Millisecond}, &reads)
		idle := func(phase string) {
			t.Helper()
			synctest.Wait()
			before := reads.Load()
			time.Sleep(time.Hour)
			synctest.Wait()
			if got := reads.Load() - before; got != 0 {
				t.Errorf("%s: the clock was read %d times in an idle hour (sweeps or replication rounds), want 0", phase, got)
			}
		}
		idle("fresh node")

		// A key with a 2 s window: swept once it has expired, then the
		// sweeper sleeps again.
		check := limit.Check{Name: "r", Key: "account:1", Hits: 1, Rule: rule(limit.FixedWindow, 10, 2*time.Second)}
		if _, err := n.CheckLocal(ctx, []limit.Check{check}); err != nil {
			t.Fatal(err)
		}
		if n.keys() != 1 {
			t.Fatalf("keys after a check = %d, want 1", n.keys())
		}
		time.Sleep(10 * time.Second)
		synctest.Wait()
		if n.keys() != 0 {
			t.Fatalf("keys 10 s after a check with a 2 s window = %d, want 0 (swept)", n.keys())
		}
		idle("after the key was swept")

		// A changed key wakes the replicator, whose round drains it. (Alone,
		// a node tracks no changes and sends nothing; tracking is turned
		// on here to see the wake-up.)
		for _, l := range n.limiters {
			l.TrackChanges(true)
		}
		check.Rule.Period = time.Hour
		if _, err := n.CheckLocal(ctx, []limit.Check{check}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(n.cfg.ReplicationInterval + time.Millisecond)
		synctest.Wait()
		if got := n.limiters[limit.FixedWindow].Changed(10, func(string) {}); got != 0 {
			t.Errorf("%d changed keys still queued one replication interval after the change, want 0 (drained by a round)", got)
		}

		// More changed keys than one round drains: the rounds go on until
		// none is left, though the signal of the rest was taken.
		batch := make([]limit.Check, 1000)
		for i := range maxReplicaKeys/len(batch) + 2 {
			for j := range batch {
				batch[j] = check
				batch[j].Key = fmt.Sprintf("account:%d-%d", i, j)
			}
			if _, err := n.CheckLocal(ctx, batch); err != nil {
				t.Fatal(err)
			}
		}
		time.Sleep(3*n.cfg.ReplicationInterval + time.Millisecond)
		synctest.Wait()
		if got := n.limiters[limit.FixedWindow].Changed(1<<20, func(string) {}); got != 0 {
			t.Errorf("%d changed keys still queued three rounds after %d changed, want 0", got, (maxReplicaKeys/len(batch)+2)*len(batch))
		}
	})
}

// TestReadyChangedSignals: a watcher of readiness needs no timer: each
// change of Ready is signalled.
func TestReadyChangedSignals(t *testing.T) {
	t.Parallel()
	n, err := New(Config{Name: "a", GRPCAddr: "127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-n.ReadyChanged(): // New built the first ring
	default:
		t.Fatal("no ReadyChanged signal after New")
	}
	if !n.Ready() {
		t.Fatal("a node without gossip is not Ready")
	}
	if err := n.Leave(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-n.ReadyChanged():
	default:
		t.Fatal("no ReadyChanged signal after Leave")
	}
	if n.Ready() {
		t.Fatal("Ready after Leave")
	}
}

// TestSweepBacksOffWhileNothingExpires: a node holding a key still in use
// (a one-hour window) sweeps less and less often, up to maxSweepBackoff ×
// SweepInterval apart, instead of every SweepInterval; a key that expires
// meanwhile is still swept within that longest interval, and the sweep
// that removes it brings the interval back. Sweeps are counted by their
// clock reads, as in TestIdleNodeRunsNoTimer.
func TestSweepBacksOffWhileNothingExpires(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		var reads atomic.Int64
		ctx, n := runCountingClock(t, Config{}, &reads)
		held := limit.Check{Name: "r", Key: "held", Hits: 1, Rule: rule(limit.FixedWindow, 10, time.Hour)}
		if _, err := n.CheckLocal(ctx, []limit.Check{held}); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		before := reads.Load()
		time.Sleep(10 * time.Minute)
		synctest.Wait()
		// 1+2+…+32 s, then every 32 s: about 23 sweeps in 10 minutes,
		// where a sweep per second would be 600.
		if got := reads.Load() - before; got > 30 || got < 10 {
			t.Errorf("%d sweeps in 10 minutes holding a key in use, want 10–30 (backed off to %v)", got, maxSweepBackoff*n.cfg.SweepInterval)
		}

		// A key with a 2 s window, checked while sweeps are 32 s apart: the
		// first sweep after it expired removes it, and the next ones come
		// 1 s and 2 s later. Backed off, the 37 s below would hold at most
		// 2 sweeps; with the reset, at least 3.
		short := limit.Check{Name: "r", Key: "short", Hits: 1, Rule: rule(limit.FixedWindow, 10, 2*time.Second)}
		if _, err := n.CheckLocal(ctx, []limit.Check{short}); err != nil {
			t.Fatal(err)
		}
		before = reads.Load()
		window := 2*time.Second + maxSweepBackoff*n.cfg.SweepInterval + 3*n.cfg.SweepInterval + time.Millisecond
		time.Sleep(window)
		synctest.Wait()
		if got := n.keys(); got != 1 {
			t.Fatalf("keys %v after a check with a 2 s window = %d, want 1 (it swept)", window, got)
		}
		if got := reads.Load() - before; got < 3 {
			t.Errorf("%d sweeps in the %v after a check with a 2 s window, want at least 3 (the interval back to %v after the sweep that removed it)", got, window, n.cfg.SweepInterval)
		}
	})
}

// runCountingClock runs a lone node "a" under cfg whose every clock read
// counts in reads, until the test's end: called inside a synctest bubble,
// the node runs on its virtual clock.
func runCountingClock(t *testing.T, cfg Config, reads *atomic.Int64) (context.Context, *Node) {
	t.Helper()
	cfg.Name, cfg.GRPCAddr = "a", "127.0.0.1:1"
	cfg.Now = func() time.Time { reads.Add(1); return time.Now() }
	n, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- n.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run() = %v", err)
		}
	})
	return ctx, n
}
