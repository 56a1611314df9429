package table

import (
	"fmt"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
)

// drained returns the keys DrainChanged(max) hands out, sorted, and its
// count.
func drained(tb *Table[struct{}], max int) ([]string, int) {
	var keys []string
	n := tb.DrainChanged(max, func(key string) { keys = append(keys, key) })
	sort.Strings(keys)
	return keys, n
}

// changeKey is add followed by MarkChanged, as a take that changed a key does.
func changeKey(tb *Table[struct{}], key string, now int64) {
	add(tb, key, now, 1)
	tb.MarkChanged(key, tb.Get(key, now))
}

func TestDrainChangedHandsOutEachChangeOnce(t *testing.T) {
	t.Parallel()
	tb := New(Config{MaxKeys: 100, TrackChanges: true}, retireZero)
	for _, k := range []string{"a", "b", "a", "a", "c"} {
		changeKey(tb, k, 1)
	}
	tb.Get("untouched", 1)
	if got, n := drained(tb, 100); !slices.Equal(got, []string{"a", "b", "c"}) || n != 3 {
		t.Fatalf("first drain = %q (%d), want [a b c] (3)", got, n)
	}
	if got, n := drained(tb, 100); len(got) != 0 || n != 0 {
		t.Fatalf("second drain = %q (%d), want nothing", got, n)
	}
	changeKey(tb, "b", 2)
	if got, _ := drained(tb, 100); !slices.Equal(got, []string{"b"}) {
		t.Fatalf("drain after b changed again = %q, want [b]", got)
	}
}

func TestDrainChangedRespectsMax(t *testing.T) {
	t.Parallel()
	tb := New(Config{MaxKeys: 1 << 16, Shards: 4, TrackChanges: true}, retireZero)
	var all []string
	for i := range 100 {
		k := fmt.Sprint("k", i)
		all = append(all, k)
		changeKey(tb, k, 1)
	}
	var got []string
	for round := 0; len(got) < len(all); round++ {
		keys, n := drained(tb, 7)
		if n != len(keys) || n > 7 || n == 0 {
			t.Fatalf("round %d: DrainChanged(7) = %d keys, reported %d", round, len(keys), n)
		}
		got = append(got, keys...)
	}
	sort.Strings(got)
	sort.Strings(all)
	if !slices.Equal(got, all) {
		t.Fatalf("drains in rounds of 7 handed out %d keys %q, want each of %d once", len(got), got, len(all))
	}
}

func TestTrackingOffMarksNothing(t *testing.T) {
	t.Parallel()
	tb := New(Config{MaxKeys: 100}, retireZero)
	changeKey(tb, "a", 1)
	if got, n := drained(tb, 100); n != 0 || len(got) != 0 {
		t.Fatalf("DrainChanged without TrackChanges = %q (%d), want nothing", got, n)
	}
	if u := tb.Get("a", 1).used.Load(); u&markBit != 0 {
		t.Fatalf("used = %#x: marked with tracking off", u)
	}
}

func TestMarkSurvivesTouchAndTouchSurvivesMark(t *testing.T) {
	t.Parallel()
	tb := New(Config{MaxKeys: 100, TrackChanges: true}, retireZero)
	changeKey(tb, "a", 1)
	tb.Get("a", 1+10*touchGranularity) // touch: keeps the mark
	if got, _ := drained(tb, 100); !slices.Equal(got, []string{"a"}) {
		t.Fatalf("drain after a touch = %q, want [a]", got)
	}
	tb.Get("a", 1+20*touchGranularity) // touch after the drain: marks nothing
	if got, _ := drained(tb, 100); len(got) != 0 {
		t.Fatalf("a touch marked %q", got)
	}
	if u := tb.Peek("a").used.Load(); u&^markBit != 20*touchGranularity {
		t.Fatalf("used = %d, want the touch at %d", u, 20*touchGranularity)
	}
}

func TestDetachedEntryIsNeverQueued(t *testing.T) {
	t.Parallel()
	tb := New(Config{MaxKeys: 100, TrackChanges: true}, retireZero)
	e := tb.Lookup("absent", 1, false)
	tb.MarkChanged("absent", e)
	if got, _ := drained(tb, 100); len(got) != 0 {
		t.Fatalf("a detached entry was queued: %q", got)
	}
}

// TestDrainSkipsRetiredEntries: keys deleted, swept or evicted after they
// were marked are not handed out, and a flood of new keys between two
// drains (every one marked, then evicted) keeps each change list bounded.
func TestDrainSkipsRetiredEntries(t *testing.T) {
	t.Parallel()
	tb := New(Config{MaxKeys: 64, Shards: 1, TrackChanges: true}, retireZero)
	changeKey(tb, "deleted", 1)
	changeKey(tb, "kept", 1)
	tb.Delete("deleted")
	changeKey(tb, "swept", 1)
	add(tb, "swept", 1, -1) // back to zero: idle
	tb.Sweep(2, 1000)
	if got, _ := drained(tb, 100); !slices.Equal(got, []string{"kept"}) {
		t.Fatalf("drain = %q, want [kept]", got)
	}
	for i := range 10_000 {
		changeKey(tb, fmt.Sprint("flood", i), int64(i))
		if n := len(tb.shards[0].changes); n > tb.changeCap {
			t.Fatalf("after %d new keys the change list holds %d, want <= %d", i+1, n, tb.changeCap)
		}
	}
	keys, _ := drained(tb, 1<<20)
	if len(keys) != tb.Len() {
		t.Fatalf("drain after the flood handed out %d keys, want the %d held", len(keys), tb.Len())
	}
}

// TestChangeIsNeverLost races writers that change keys (and mark them)
// with a drainer that reads each key it is handed. Once the writers are
// done and a last drain has run, the drainer must have read every key's
// final value: a change made while its key was being drained marks it
// again rather than being lost.
func TestChangeIsNeverLost(t *testing.T) {
	t.Parallel()
	tb := New(Config{MaxKeys: 1 << 10, Shards: 4, TrackChanges: true}, retireZero)
	const writers, perWriter, keys = 4, 20_000, 16
	seen := map[string]int64{}
	read := func(key string) { seen[key] = tb.Get(key, 1).Word.Load() }
	var wg sync.WaitGroup
	var done atomic.Bool
	for w := range writers {
		wg.Go(func() {
			for i := range perWriter {
				changeKey(tb, fmt.Sprint("k", (w+i)%keys), 1)
			}
		})
	}
	drainer := make(chan struct{})
	go func() {
		defer close(drainer)
		for !done.Load() {
			tb.DrainChanged(5, read)
		}
	}()
	wg.Wait()
	done.Store(true)
	<-drainer
	tb.DrainChanged(1<<20, read)
	total := int64(0)
	for i := range keys {
		k := fmt.Sprint("k", i)
		final := tb.Get(k, 1).Word.Load()
		if seen[k] != final {
			t.Errorf("key %s: drainer last read %d, final value %d: a change was lost", k, seen[k], final)
		}
		total += final
	}
	if total != writers*perWriter {
		t.Fatalf("sum of keys = %d, want %d", total, writers*perWriter)
	}
}

func TestRangeVisitsLiveKeysWithNoLockHeld(t *testing.T) {
	t.Parallel()
	tb := New(Config{MaxKeys: 1000, Shards: 4}, retireZero)
	for i := range 100 {
		tb.Get(fmt.Sprint("k", i), 1)
	}
	tb.Get("dead", 1).kill() // retired, not yet unlinked
	var got []string
	tb.Range(func(key string) bool {
		got = append(got, key)
		tb.Delete(key) // would deadlock if Range held the shard's lock
		tb.Get("k"+key, 1)
		return true
	})
	if len(got) < 100 {
		t.Fatalf("Range visited %d keys, want the 100 live ones at least", len(got))
	}
	if slices.Contains(got, "dead") {
		t.Fatalf("Range visited a retired key")
	}
	n := 0
	tb.Range(func(string) bool { n++; return n < 3 })
	if n != 3 {
		t.Fatalf("Range went on after fn returned false: %d calls, want 3", n)
	}
}

func TestDeleteAndPeek(t *testing.T) {
	t.Parallel()
	tb := New(Config{MaxKeys: 100}, retireZero)
	if tb.Peek("a") != nil {
		t.Fatalf("Peek of an absent key is not nil")
	}
	e := tb.Get("a", 1)
	if tb.Peek("a") != e || tb.Len() != 1 {
		t.Fatalf("Peek does not find the entry Get made")
	}
	e.kill() // retired by a sweep, not yet unlinked
	if tb.Peek("a") != nil {
		t.Fatalf("Peek returned a retired entry")
	}
	if tb.Delete("a") {
		t.Fatalf("Delete of a retired entry = true, want false (not live)")
	}
	if tb.Len() != 0 {
		t.Fatalf("Len = %d after Delete, want 0", tb.Len())
	}
}

// TestSetTrackChangesOffDropsTheQueue: turning tracking off drops what was
// queued and clears the marks, so a key changed once it is on again is
// handed out again; changes made while it was off are not.
func TestSetTrackChangesOffDropsTheQueue(t *testing.T) {
	t.Parallel()
	tb := New(Config{MaxKeys: 100, TrackChanges: true}, retireZero)
	changeKey(tb, "a", 1)
	changeKey(tb, "b", 1)
	tb.SetTrackChanges(false)
	changeKey(tb, "c", 2) // off: not tracked
	if got, n := drained(tb, 100); len(got) != 0 || n != 0 {
		t.Fatalf("drain while off = %q (%d), want nothing", got, n)
	}
	tb.SetTrackChanges(true)
	if got, n := drained(tb, 100); len(got) != 0 || n != 0 {
		t.Fatalf("drain after turning on = %q (%d), want nothing: the old queue was dropped", got, n)
	}
	changeKey(tb, "a", 3)
	changeKey(tb, "c", 3)
	if got, n := drained(tb, 100); !slices.Equal(got, []string{"a", "c"}) || n != 2 {
		t.Fatalf("drain after changes = %q (%d), want [a c] (2): the marks were cleared", got, n)
	}
}

func TestOnChangeOncePerQueuedKey(t *testing.T) {
	t.Parallel()
	var calls atomic.Int64
	tb := New(Config{MaxKeys: 100, TrackChanges: true, OnChange: func() { calls.Add(1) }}, retireZero)
	for _, k := range []string{"a", "a", "b", "a", "b"} {
		changeKey(tb, k, 1)
	}
	if got := calls.Load(); got != 2 {
		t.Fatalf("OnChange after changing a 3 times and b twice: %d calls, want 2", got)
	}
	drained(tb, 100)
	changeKey(tb, "a", 2)
	changeKey(tb, "a", 3)
	if got := calls.Load(); got != 3 {
		t.Fatalf("OnChange after a drain and a changed twice: %d calls, want 3", got)
	}
	tb.SetTrackChanges(false)
	changeKey(tb, "c", 4)
	if got := calls.Load(); got != 3 {
		t.Fatalf("OnChange with tracking off: %d calls, want 3", got)
	}
}
