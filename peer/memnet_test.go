package peer

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/shardlimiter/shardlimiter/internal/poll"
	"github.com/shardlimiter/shardlimiter/limit"
	"github.com/shardlimiter/shardlimiter/transport"
)

// Nodes on a MemNet, without gRPC, hand their keys over on a join and a
// leave as they do over the wire: every key admits exactly its limit in
// all, for every algorithm, whichever node the checks enter.
func TestMemNetCountsSurviveJoinAndLeave(t *testing.T) {
	t.Parallel()
	for _, r := range handoffAlgorithms {
		t.Run(r.Algorithm.String(), func(t *testing.T) {
			t.Parallel()
			clk := newClock()
			c := newMemCluster(t, 2, Config{Now: clk.Now, ReplicationInterval: 10 * time.Millisecond})
			before := c.degraded()
			keys := testKeys(60)
			first := c.running()[0]
			c.assertExact("before the join", c.spend(first, keys, r, 4), 4*len(keys), before)

			joined := c.add()
			c.waitSettled()
			moved := 0
			for _, k := range keys {
				if joined.node.view.Load().snap.Owner(k).Name == joined.name {
					moved++
				}
			}
			if moved == 0 {
				t.Fatal("the join moved no key: the test proves nothing")
			}
			got := 0
			for _, tn := range c.running() {
				got += c.spend(tn, keys, r, 1)
			}
			c.assertExact(fmt.Sprintf("after the join (%d of %d keys moved)", moved, len(keys)), got, 3*len(keys), before)

			c.leave(joined)
			c.signal()
			c.waitConverged()
			c.waitSettled()
			got = 0
			for _, tn := range c.running() {
				got += c.spend(tn, keys, r, 2)
			}
			c.assertExact("after the leave", got, 3*len(keys), before)
		})
	}
}

// A partition between the entry node and a key's owner sends the key's
// checks to the holder of its replica, which decides them from the
// replicated count; once the link is healed, the owner decides again.
func TestMemNetPartitionGoesToStandIn(t *testing.T) {
	t.Parallel()
	clk := newClock()
	c := newMemCluster(t, 3, Config{Now: clk.Now, ReplicationInterval: 10 * time.Millisecond, PeerBackoff: 20 * time.Millisecond})
	nodes := c.running()
	entry, owner := nodes[0], nodes[1]
	key := keyOwnedBy(t, entry, owner.name)
	standin := entry.node.view.Load().without(owner.name).Owner(key).Name
	r := rule(limit.FixedWindow, 10, time.Hour)
	if got := c.spend(entry, []string{key}, r, 6); got != 6 {
		t.Fatalf("before the cut: %d admitted, want 6", got)
	}
	// The owner's count has reached its replica holder.
	var kb keyBuf
	tk := kb.key("quota", key)
	holder := c.byName(standin)
	poll.Until(t, 10*time.Second, func() bool {
		now := clk.Now().UnixNano()
		want, _ := owner.node.limiters[limit.FixedWindow].Export(tk, now)
		got, _ := holder.node.limiters[limit.FixedWindow].Export(tk, now)
		return string(got) == string(want)
	}, "the replica of %s reaches %s", key, standin)

	c.net.Cut(entry.name, owner.name)
	admitted := 0
	for range 6 {
		res := c.check(entry, limit.Check{Name: "quota", Key: key, Hits: 1, Rule: r})[0]
		if res.Error != "" || res.Owner != standin {
			t.Fatalf("during the cut: %+v, want decided by the stand-in %s", res, standin)
		}
		if res.Allowed {
			admitted++
		}
	}
	if admitted != 4 {
		t.Errorf("during the cut: the stand-in admitted %d of 6, want the 4 the replica leaves", admitted)
	}

	c.net.Heal(entry.name, owner.name)
	poll.Until(t, 10*time.Second, func() bool {
		res := c.check(entry, limit.Check{Name: "quota", Key: key, Hits: 0, Rule: r})[0]
		return res.Owner == owner.name
	}, "the owner %s decides again once healed", owner.name)
}

// byName returns the running node called name.
func (c *testCluster) byName(name string) *testNode {
	for _, tn := range c.running() {
		if tn.name == name {
			return tn
		}
	}
	c.t.Fatalf("no running node %s", name)
	return nil
}

// A MemNet link delays each call by the latency, times out like a gRPC
// link, fails at once across a cut or to a node gone, and refuses calls
// once closed. In a synctest bubble the latency is fake time: the test
// takes none.
func TestMemNetLink(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n, err := New(Config{Name: "b"})
		if err != nil {
			t.Fatal(err)
		}
		mn := NewMemNet()
		mn.Add("b:1", n)
		l, err := mn.Dial("a", "b:1")
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		check := []limit.Check{{Name: "x", Key: "k", Hits: 1, Rule: rule(limit.FixedWindow, 5, time.Hour)}}

		mn.SetLatency(10 * time.Millisecond)
		start := time.Now()
		res, err := l.Forward(ctx, check, false)
		if err != nil || len(res) != 1 || !res[0].Allowed || res[0].Owner != "b" {
			t.Fatalf("Forward = %+v, %v; want admitted by b", res, err)
		}
		if d := time.Since(start); d != 10*time.Millisecond {
			t.Errorf("Forward took %v, want the latency, 10ms", d)
		}

		mn.SetTimeout(5 * time.Millisecond)
		if _, err := l.Forward(ctx, check, false); !errors.Is(err, transport.ErrTimeout) {
			t.Errorf("Forward slower than its timeout: %v, want transport.ErrTimeout", err)
		}
		// State calls get at least transport.StateTimeout.
		if info, err := l.Ring(ctx); err != nil || info.Node != "b" {
			t.Errorf("Ring = %+v, %v; want b's ring", info, err)
		}
		mn.SetLatency(0)

		mn.Cut("b", "a")
		if _, err := l.Forward(ctx, check, false); !errors.Is(err, transport.ErrUnavailable) {
			t.Errorf("Forward across a cut: %v, want transport.ErrUnavailable", err)
		}
		mn.Heal("a", "b")
		if _, err := l.Forward(ctx, check, true); err != nil {
			t.Errorf("Forward after Heal: %v", err)
		}
		mn.Remove("b:1")
		if err := l.Push(ctx, limit.Replica, nil, nil); !errors.Is(err, transport.ErrUnavailable) {
			t.Errorf("Push to a node removed: %v, want transport.ErrUnavailable", err)
		}
		if mn.Links("a") != 1 {
			t.Errorf("Links(a) = %d, want 1", mn.Links("a"))
		}
		l.Close()
		if _, err := l.Pull(ctx, limit.PullRequest{}); !errors.Is(err, transport.ErrClosed) {
			t.Errorf("Pull on a closed link: %v, want transport.ErrClosed", err)
		}
		if mn.Links("a") != 0 {
			t.Errorf("Links(a) = %d after Close, want 0", mn.Links("a"))
		}
	})
}
