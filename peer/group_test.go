package peer

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shardlimiter/shardlimiter/limit"
)

// twoLimits is one descriptor with two limits on one key: perSecond per second
// (fixed window) and perHour per hour (sliding log), hits each.
func twoLimits(key string, hits, perSecond, perHour int64) []limit.Check {
	return []limit.Check{
		{Name: "sec", Key: key, Hits: hits, Chained: true, Rule: rule(limit.FixedWindow, perSecond, time.Second)},
		{Name: "hour", Key: key, Hits: hits, Rule: rule(limit.SlidingLog, perHour, time.Hour)},
	}
}

// remaining peeks at the two counters of a group.
func remaining(t *testing.T, n *Node, key string) (sec, hour int64) {
	t.Helper()
	g := twoLimits(key, 0, 10, 15)
	g[0].Chained = false
	res, err := n.Check(context.Background(), g)
	if err != nil || res[0].Error != "" || res[1].Error != "" {
		t.Fatalf("peek %q = %+v, %v", key, res, err)
	}
	return res[0].Remaining, res[1].Remaining
}

// TestGroupAllOrNothing steps a group of 10/s and 15/h through named
// instants: a group is admitted only when both limits admit, and a refused
// group counts in neither.
func TestGroupAllOrNothing(t *testing.T) {
	t.Parallel()
	n, clk := newSingle(t)
	ctx := context.Background()
	take := func() []limit.Result {
		res, err := n.Check(ctx, twoLimits("k", 1, 10, 15))
		if err != nil {
			t.Fatal(err)
		}
		if res[0].Allowed != res[1].Allowed {
			t.Fatalf("group answered %+v: members disagree", res)
		}
		return res
	}
	// t0: 10 admitted by both, the 11th refused by the second limit alone.
	for i := range 10 {
		if res := take(); !res[0].Allowed {
			t.Fatalf("t0 take %d = %+v, want admitted", i, res)
		}
	}
	if res := take(); res[0].Allowed || res[0].RetryAfter <= 0 {
		t.Fatalf("t0 take 11 = %+v, want refused with a retry", res)
	}
	if sec, hour := remaining(t, n, "k"); sec != 0 || hour != 5 {
		t.Fatalf("t0 remaining = %d/s %d/h, want 0 and 5: the refused group must not count in the hour", sec, hour)
	}
	// t1 = t0+1s: a new second; the hour admits 5 more, then refuses.
	clk.Advance(time.Second)
	for i := range 5 {
		if res := take(); !res[0].Allowed {
			t.Fatalf("t1 take %d = %+v, want admitted", i, res)
		}
	}
	if res := take(); res[0].Allowed {
		t.Fatalf("t1 take 6 = %+v, want refused by the hour", res)
	}
	if sec, hour := remaining(t, n, "k"); sec != 5 || hour != 0 {
		t.Fatalf("t1 remaining = %d/s %d/h, want 5 and 0: the refused group must not count in the second", sec, hour)
	}
}

func TestBadGroupsFailWhole(t *testing.T) {
	t.Parallel()
	n, _ := newSingle(t)
	mixed := twoLimits("a", 1, 10, 10)
	mixed[1].Key = "b"
	invalid := twoLimits("d", 1, 10, 10)
	invalid[1].Rule.Limit = 0
	for name, g := range map[string][]limit.Check{"mixed keys": mixed, "invalid member": invalid} {
		batch := append(append([]limit.Check{}, g...), limit.Check{Name: "alone", Key: name, Hits: 1, Rule: rule(limit.FixedWindow, 1, time.Second)})
		res, _ := n.Check(context.Background(), batch)
		for i := range g {
			if res[i].Reason != limit.Invalid {
				t.Errorf("%s: member %d = %+v, want invalid", name, i, res[i])
			}
		}
		if last := res[len(g)]; !last.Allowed || last.Error != "" {
			t.Errorf("%s: the check after the group = %+v, want decided alone", name, last)
		}
	}
	if res, _ := n.Check(context.Background(), mixed); !strings.Contains(res[0].Error, "mixes unique_key") {
		t.Errorf("mixed keys error = %q", res[0].Error)
	}
	// A chain that runs off the end of the batch has no end.
	if res, _ := n.Check(context.Background(), twoLimits("c", 1, 10, 10)[:1]); !strings.Contains(res[0].Error, "chained to no next check") {
		t.Errorf("dangling chain = %+v", res[0])
	}
}

// TestGroupConcurrency: 16 goroutines send groups of 1 or 2 hits to one key
// under 40/s and 25/h at a fixed instant. The hits admitted never exceed
// either limit, every limit counts exactly the hits admitted (never a
// refused group's), and the tighter limit is used up.
func TestGroupConcurrency(t *testing.T) {
	t.Parallel()
	n, _ := newSingle(t)
	const workers, perWorker, perSecond, perHour = 16, 40, 40, 25
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range perWorker {
				hits := int64(1 + (w+i)%2)
				res, err := n.Check(context.Background(), twoLimits("hot", hits, perSecond, perHour))
				if err != nil || res[0].Error != "" {
					t.Errorf("check: %+v %v", res, err)
					return
				}
				if res[0].Allowed != res[1].Allowed {
					t.Errorf("members disagree: %+v", res)
				}
				if res[0].Allowed {
					admitted.Add(hits)
				}
			}
		})
	}
	wg.Wait()
	got := admitted.Load()
	g := twoLimits("hot", 0, perSecond, perHour) // peeks, with the group's own rules
	g[0].Chained = false
	res, _ := n.Check(context.Background(), g)
	sec, hour := res[0].Remaining, res[1].Remaining
	if got > perHour || got < perHour-1 {
		t.Errorf("admitted %d hits, want %d (or %d when only 2-hit groups were left)", got, perHour, perHour-1)
	}
	if perSecond-sec != got || perHour-hour != got {
		t.Errorf("counted %d/s and %d/h for %d hits admitted: a refused group was counted", perSecond-sec, perHour-hour, got)
	}
}

// TestGroupForwarded: a group entering a node that does not own its key is
// forwarded whole and decided all or nothing by the owner.
func TestGroupForwarded(t *testing.T) {
	t.Parallel()
	clk := newClock()
	c := newTestCluster(t, 3, Config{Now: clk.Now})
	nodes := c.running()
	for k := range 12 {
		key := fmt.Sprint("route:", k)
		admitted := 0
		for i := range 18 {
			res := c.check(nodes[i%len(nodes)], twoLimits(key, 1, 10, 15)...)
			if res[0].Error != "" || res[0].Allowed != res[1].Allowed || res[0].Owner != res[1].Owner {
				t.Fatalf("key %d take %d = %+v", k, i, res)
			}
			if res[0].Allowed {
				admitted++
			}
		}
		if admitted != 10 {
			t.Errorf("key %d: admitted %d groups, want 10", k, admitted)
		}
	}
}

// TestGroupMinInterval steps a group of a FIXED_WINDOW (10/min) and a
// SLIDING_LOG (10/h, min_interval 1 s) through named instants: a group the
// interval refuses counts in neither, though the log has hits to spare.
func TestGroupMinInterval(t *testing.T) {
	t.Parallel()
	n, clk := newSingle(t)
	ctx := context.Background()
	spaced := rule(limit.SlidingLog, 10, time.Hour)
	spaced.MinInterval = time.Second
	group := func(hits int64) []limit.Check {
		return []limit.Check{
			{Name: "min", Key: "k", Hits: hits, Chained: hits > 0, Rule: rule(limit.FixedWindow, 10, time.Minute)},
			{Name: "spaced", Key: "k", Hits: hits, Rule: spaced},
		}
	}
	check := func(at string, hits int64) []limit.Result {
		t.Helper()
		res, err := n.Check(ctx, group(hits))
		if err != nil || res[0].Error != "" || res[1].Error != "" {
			t.Fatalf("%s: Check = %+v, %v", at, res, err)
		}
		return res
	}
	steps := []struct {
		at           string
		advance      time.Duration
		allowed      bool
		minute, hour int64 // remaining after the step
	}{
		{"t0", 0, true, 9, 9},
		{"t0+100ms", 100 * time.Millisecond, false, 9, 9}, // the interval refuses: the minute keeps its 9
		{"t0+999ms", 899 * time.Millisecond, false, 9, 9},
		{"t0+1s", time.Millisecond, true, 8, 8},
		{"t0+1.5s", 500 * time.Millisecond, false, 8, 8},
	}
	for _, s := range steps {
		clk.Advance(s.advance)
		res := check(s.at, 1)
		if res[0].Allowed != s.allowed || res[1].Allowed != s.allowed {
			t.Fatalf("%s: group = %+v, want allowed %v in both", s.at, res, s.allowed)
		}
		if !s.allowed && res[0].RetryAfter <= 0 {
			t.Errorf("%s: refused with RetryAfter %v, want > 0", s.at, res[0].RetryAfter)
		}
		peek := check(s.at+" peek", 0)
		if peek[0].Remaining != s.minute || peek[1].Remaining != s.hour {
			t.Fatalf("%s: remaining %d/min %d/h, want %d and %d: a refused group must count in neither",
				s.at, peek[0].Remaining, peek[1].Remaining, s.minute, s.hour)
		}
	}
}

// TestGroupOverdraft: a group whose limits all count every hit
// (limit.Overdraft) counts a refused group's hits in every limit, and a
// check of 0 hits is refused only while a limit is over.
func TestGroupOverdraft(t *testing.T) {
	t.Parallel()
	n, clk := newSingle(t)
	group := func(hits int64) []limit.Check {
		sec, min := rule(limit.FixedWindow, 3, time.Second), rule(limit.FixedWindow, 5, time.Minute)
		sec.Behavior, min.Behavior = limit.Overdraft, limit.Overdraft
		return []limit.Check{
			{Name: "sec", Key: "k", Hits: hits, Chained: true, Rule: sec},
			{Name: "min", Key: "k", Hits: hits, Rule: min},
		}
	}
	steps := []struct {
		at          string
		advance     time.Duration
		hits        int64
		allowed     bool
		sec, perMin int64 // remaining after the step
	}{
		{"t0", 0, 3, true, 0, 2},
		{"t0", 0, 0, true, 0, 2},  // at the second's limit, not over it
		{"t0", 0, 2, false, 0, 0}, // refused by the second, counted in both
		{"t0", 0, 0, false, 0, 0}, // the second is over
		{"t0+1s", time.Second, 0, true, 3, 0},
		{"t0+1s", 0, 1, false, 2, 0}, // the minute refuses; counted in both
		{"t0+1s", 0, 0, false, 2, 0}, // the minute is over
	}
	for i, s := range steps {
		clk.Advance(s.advance)
		res, err := n.Check(context.Background(), group(s.hits))
		if err != nil || res[0].Error != "" || res[1].Error != "" {
			t.Fatalf("step %d (%s): Check = %+v, %v", i, s.at, res, err)
		}
		if res[0].Allowed != s.allowed || res[1].Allowed != s.allowed || res[0].Remaining != s.sec || res[1].Remaining != s.perMin {
			t.Fatalf("step %d (%s): Check(hits %d) = %+v, want allowed %v, remaining %d/s %d/min", i, s.at, s.hits, res, s.allowed, s.sec, s.perMin)
		}
	}
}
