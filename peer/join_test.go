package peer

import (
	"context"
	"testing"
	"time"

	"github.com/shardlimiter/shardlimiter/limit"
	"github.com/shardlimiter/shardlimiter/ring"
)

// TestJoiningNodePullsAfterAnEarlyPush: a member whose ring has the new
// node before the new node's own ring does pushes it keys. That must not
// make the new node, on its first rebuild, take itself for the old owner
// of every partition (it once did, keys held being the test): it still
// pulls what it gained from the ring the others had, or the old owners
// that have not pushed yet go on deciding while it starts from nothing.
// Only checks decided while it was alone make it an owner.
func TestJoiningNodePullsAfterAnEarlyPush(t *testing.T) {
	t.Parallel()
	for _, decided := range []bool{false, true} {
		n, err := New(Config{Name: "c"})
		if err != nil {
			t.Fatal(err)
		}
		src, err := New(Config{Name: "a"})
		if err != nil {
			t.Fatal(err)
		}
		r := limit.Rule{Algorithm: limit.FixedWindow, Limit: 10, Period: time.Hour}
		ctx := context.Background()
		if _, err := src.Check(ctx, []limit.Check{{Name: "q", Key: "account:1", Hits: 1, Rule: r}}); err != nil {
			t.Fatal(err)
		}
		var kb keyBuf
		st, ok := src.limiters[limit.FixedWindow].Export(kb.key("q", "account:1"), time.Now().UnixNano())
		if !ok {
			t.Fatal("nothing to export")
		}
		if err := n.Push(ctx, "a", limit.Join, nil, []limit.KeyState{{Algorithm: limit.FixedWindow, Key: kb.key("q", "account:1"), State: st}}); err != nil {
			t.Fatal(err)
		}
		if decided {
			if _, err := n.Check(ctx, []limit.Check{{Name: "q", Key: "account:2", Hits: 1, Rule: r}}); err != nil {
				t.Fatal(err)
			}
		}
		if err := n.rebuild([]ring.Member{{Name: "a", Addr: "127.0.0.1:1"}, {Name: "b", Addr: "127.0.0.1:2"}, {Name: "c", Addr: "127.0.0.1:3"}}); err != nil {
			t.Fatal(err)
		}
		pulls, pushes := 0, 0
		n.mv.jobsMu.Lock()
		for _, j := range n.mv.jobs {
			if j.pull {
				pulls++
			} else {
				pushes++
			}
		}
		n.mv.jobsMu.Unlock()
		if !decided && (pulls == 0 || pushes != 0) {
			t.Errorf("a joining node holding only pushed keys planned %d pulls and %d pushes, want pulls and no push", pulls, pushes)
		}
		if decided && (pulls != 0 || pushes == 0) {
			t.Errorf("a node that decided alone planned %d pulls and %d pushes, want pushes and no pull", pulls, pushes)
		}
	}
}
