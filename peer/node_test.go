package peer

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shardlimiter/shardlimiter/limit"
)

// fixedClock is a clock tests move by hand.
type fixedClock struct{ ns atomic.Int64 }

func newClock() *fixedClock {
	c := &fixedClock{}
	c.ns.Store(time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC).UnixNano())
	return c
}
func (c *fixedClock) Now() time.Time          { return time.Unix(0, c.ns.Load()) }
func (c *fixedClock) Advance(d time.Duration) { c.ns.Add(int64(d)) }

func rule(a limit.Algorithm, lim int64, period time.Duration) limit.Rule {
	return limit.Rule{Algorithm: a, Limit: lim, Period: period}
}

func newSingle(t *testing.T) (*Node, *fixedClock) {
	t.Helper()
	clk := newClock()
	n, err := New(Config{Name: "solo", Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	return n, clk
}

func TestSingleNodeDecidesEveryAlgorithm(t *testing.T) {
	t.Parallel()
	n, _ := newSingle(t)
	for _, a := range limit.Algorithms() {
		c := limit.Check{Name: "r", Key: "k-" + a.String(), Hits: 1, Rule: rule(a, 3, time.Hour)}
		if a == limit.LeakyBucket {
			c.Rule.Burst = 2 // a queue of 2 behind the slot being served
		}
		var admitted int
		for range 5 {
			res, err := n.Check(context.Background(), []limit.Check{c})
			if err != nil || res[0].Error != "" {
				t.Fatalf("%v: Check = %+v, %v", a, res, err)
			}
			if res[0].Owner != "solo" {
				t.Fatalf("%v: owner %q, want solo", a, res[0].Owner)
			}
			if res[0].Allowed {
				admitted++
			}
		}
		if admitted != 3 {
			t.Errorf("%v: admitted %d of 5 at limit 3, want 3", a, admitted)
		}
	}
}

func TestTableKeysDoNotCollide(t *testing.T) {
	t.Parallel()
	n, _ := newSingle(t)
	r := rule(limit.FixedWindow, 1, time.Hour)
	a := limit.Check{Name: "a_b", Key: "c", Hits: 1, Rule: r}
	b := limit.Check{Name: "a", Key: "b_c", Hits: 1, Rule: r}
	res, _ := n.Check(context.Background(), []limit.Check{a, b})
	if !res[0].Allowed || !res[1].Allowed {
		t.Fatalf("(a_b, c) and (a, b_c) share state: %+v", res)
	}
	var kb keyBuf
	if k1, k2 := strings.Clone(kb.key("a_b", "c")), kb.key("a", "b_c"); k1 == k2 {
		t.Fatalf("key(a_b, c) == key(a, b_c) == %q", k1)
	}
}

func TestBadItemsAnsweredAlone(t *testing.T) {
	t.Parallel()
	n, _ := newSingle(t)
	good := limit.Check{Name: "r", Key: "k", Hits: 1, Rule: rule(limit.TokenBucket, 1000, time.Second)}
	cases := []struct {
		name string
		mod  func(*limit.Check)
		want string
	}{
		{"empty name", func(c *limit.Check) { c.Name = "" }, "name is empty"},
		{"empty key", func(c *limit.Check) { c.Key = "" }, "unique_key is empty"},
		{"long key", func(c *limit.Check) { c.Key = strings.Repeat("k", limit.MaxKeyLen+1) }, "unique_key is"},
		{"zero limit", func(c *limit.Check) { c.Rule.Limit = 0 }, "limit must be > 0"},
		{"zero period", func(c *limit.Check) { c.Rule.Period = 0 }, "duration_ms must be > 0"},
		{"negative hits", func(c *limit.Check) { c.Hits = -1 }, "hits must be >= 0"},
		{"unknown algorithm", func(c *limit.Check) { c.Rule.Algorithm = 9 }, "unknown algorithm"},
		{"warmup on a window", func(c *limit.Check) { c.Rule.Algorithm = limit.FixedWindow; c.Rule.Warmup = time.Second }, "warmup_ms applies to TOKEN_BUCKET only"},
		{"min interval on a bucket", func(c *limit.Check) { c.Rule.MinInterval = time.Second }, "min_interval_ms applies to SLIDING_LOG only"},
	}
	for _, tc := range cases {
		bad := good
		tc.mod(&bad)
		res, err := n.Check(context.Background(), []limit.Check{good, bad, good})
		if err != nil {
			t.Fatalf("%s: Check error %v", tc.name, err)
		}
		if res[1].Reason != limit.Invalid || !strings.Contains(res[1].Error, tc.want) {
			t.Errorf("%s: item = %+v, want invalid %q", tc.name, res[1], tc.want)
		}
		if res[0].Error != "" || res[2].Error != "" || !res[0].Allowed {
			t.Errorf("%s: good items not answered: %+v", tc.name, res)
		}
	}
}

// TestClusterAdmitsExactlyTheLimit sprays hits for many keys over every node
// of a cluster: whatever node a check enters, each key admits exactly what
// one big limiter (a single node fed the same sequence) admits, and for
// the counting algorithms exactly the limit.
func TestClusterAdmitsExactlyTheLimit(t *testing.T) {
	t.Parallel()
	clk := newClock()
	c := newTestCluster(t, 4, Config{Now: clk.Now, Peer: exactPeer})
	solo, err := New(Config{Name: "solo", Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	nodes := c.running()
	const keys, limitPerKey, rounds = 60, 7, 12
	for _, a := range limit.Algorithms() {
		before := c.degraded()
		r := rule(a, limitPerKey, time.Hour)
		if a == limit.LeakyBucket {
			r.Burst = limitPerKey - 1
		}
		got, want := make([]int, keys), make([]int, keys)
		owners := make([]map[string]bool, keys)
		for round := range rounds {
			for ni, tn := range nodes {
				var batch []limit.Check
				var idx []int
				for k := range keys {
					if (k+round)%len(nodes) == ni {
						batch = append(batch, limit.Check{Name: "exact", Key: fmt.Sprint("account:", k), Hits: 1, Rule: r})
						idx = append(idx, k)
					}
				}
				ref, _ := solo.Check(context.Background(), batch)
				for j, res := range c.check(tn, batch...) {
					k := idx[j]
					if res.Error != "" {
						t.Fatalf("%v: item error %q", a, res.Error)
					}
					if owners[k] == nil {
						owners[k] = map[string]bool{}
					}
					owners[k][res.Owner] = true
					if res.Allowed {
						got[k]++
					}
					if ref[j].Allowed {
						want[k]++
					}
				}
			}
		}
		// A forward that timed out on a loaded machine was decided by the
		// fail policy: the counts are then its, not exact (see assertExact).
		report := t.Errorf
		if d := c.degraded() - before; d > 0 {
			t.Logf("%v: %v fail-policy decisions: counts are not exact", a, d)
			report = t.Logf
		}
		for k := range keys {
			if got[k] != want[k] {
				report("%v: key %d admitted %d in the cluster, %d on one node", a, k, got[k], want[k])
			}
			if a != limit.LeakyBucket && got[k] != limitPerKey {
				report("%v: key %d admitted %d, want exactly %d", a, k, got[k], limitPerKey)
			}
			if len(owners[k]) != 1 {
				report("%v: key %d decided by %v, want one owner", a, k, owners[k])
			}
		}
	}
}

// TestPeeksDoNotFillTables: a flood of peeks at unknown keys must neither
// grow the tables nor evict keys in use.
func TestPeeksDoNotFillTables(t *testing.T) {
	t.Parallel()
	n, _ := newSingle(t)
	for _, a := range limit.Algorithms() {
		var batch []limit.Check
		for i := range 200 {
			batch = append(batch, limit.Check{Name: "peek", Key: fmt.Sprint("unknown:", i), Hits: 0, Rule: rule(a, 5, time.Minute)})
		}
		res, _ := n.Check(context.Background(), batch)
		want := int64(5)
		if a == limit.LeakyBucket {
			want = 1 // burst 0: strict spacing, room for the one slot
		}
		if res[0].Remaining != want || res[0].Error != "" {
			t.Fatalf("%v: peek at an unknown key = %+v, want %d remaining", a, res[0], want)
		}
		if l := n.limiters[a].Len(); l != 0 {
			t.Errorf("%v: %d keys held after peeks only, want 0", a, l)
		}
	}
}
