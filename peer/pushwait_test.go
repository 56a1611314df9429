package peer

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/shardlimiter/shardlimiter/limit"
	"github.com/shardlimiter/shardlimiter/ring"
)

// TestMovedAnswerWaitsForThePush: a node that moved a partition names the
// new owner only once its push of it has been answered (or handoffWait
// has passed), so that the new owner already holds the state when the
// sender comes.
func TestMovedAnswerWaitsForThePush(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		n, err := New(Config{Name: "a", GRPCAddr: "127.0.0.1:1"})
		if err != nil {
			t.Fatal(err)
		}
		check := limit.Check{Name: "r", Key: "account:1", Hits: 1, Rule: rule(limit.FixedWindow, 10, time.Hour)}
		to := ring.Member{Name: "b", Addr: "127.0.0.1:2"}
		mark := func() chan struct{} {
			pushed := make(chan struct{})
			p := n.view.Load().snap.PartitionOf(check.Key)
			n.ho.mu.Lock()
			n.ho.setLocked(p, partMoved, partDetail{to: to, pushed: pushed})
			n.ho.mu.Unlock()
			return pushed
		}
		answer := func() <-chan limit.Result {
			out := make(chan limit.Result, 1)
			go func() {
				res, err := n.CheckLocal(context.Background(), []limit.Check{check})
				if err != nil {
					t.Errorf("CheckLocal: %v", err)
				}
				out <- res[0]
			}()
			return out
		}

		pushed := mark()
		got := answer()
		synctest.Wait()
		select {
		case r := <-got:
			t.Fatalf("answered %+v before the push landed", r)
		default:
		}
		start := time.Now()
		close(pushed)
		if r := <-got; r.Reason != limit.NotOwner || r.Owner != "b" {
			t.Errorf("after the push: %+v, want not owner, naming b", r)
		}
		if d := time.Since(start); d != 0 {
			t.Errorf("answered %v after the push landed, want at once", d)
		}

		// A push that is never answered holds the answer handoffWait at most.
		mark()
		start = time.Now()
		if r := <-answer(); r.Reason != limit.NotOwner || r.Owner != "b" {
			t.Errorf("push unanswered: %+v, want not owner, naming b", r)
		}
		if d := time.Since(start); d != handoffWait {
			t.Errorf("push unanswered: answered after %v, want handoffWait (%v)", d, handoffWait)
		}
	})
}
