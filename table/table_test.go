package table

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
)

// counter is a word algorithm for tests: the word counts hits; a word of
// zero is idle.
func add(t *Table[struct{}], key string, now int64, n int64) int64 {
	return UpdateWord(t, key, now, func(w int64) (int64, int64) { return w + n, w + n })
}

func retireZero(e *Entry[struct{}], _ int64) bool {
	return e.RetireWordIf(func(w int64) bool { return w == 0 })
}

func TestGetCreatesZeroEntryOnce(t *testing.T) {
	t.Parallel()
	tb := New(Config{MaxKeys: 100}, retireZero)
	a := tb.Get("a", 1)
	if a.Word.Load() != 0 {
		t.Fatalf("new entry word = %d, want 0", a.Word.Load())
	}
	if b := tb.Get("a", 2); b != a {
		t.Fatalf("Get(%q) twice returned different entries", "a")
	}
	if got := tb.Len(); got != 1 {
		t.Fatalf("Len() = %d, want 1", got)
	}
	if !tb.Delete("a") || tb.Delete("a") {
		t.Fatalf("Delete(%q) twice: want true then false", "a")
	}
	if !a.Dead() {
		t.Fatalf("deleted entry is not Dead")
	}
	if got := tb.Len(); got != 0 {
		t.Fatalf("Len() after Delete = %d, want 0", got)
	}
}

func TestSweepRemovesOnlyIdle(t *testing.T) {
	t.Parallel()
	tb := New(Config{MaxKeys: 1000}, retireZero)
	for i := range 100 {
		key := fmt.Sprint("k", i)
		tb.Get(key, 1)
		if i%2 == 1 {
			add(tb, key, 1, 1)
		}
	}
	removed := tb.Sweep(2, 1<<30)
	if removed != 50 || tb.Len() != 50 {
		t.Fatalf("Sweep removed %d, Len %d; want 50, 50", removed, tb.Len())
	}
	for i := 1; i < 100; i += 2 {
		if got := add(tb, fmt.Sprint("k", i), 3, 0); got != 1 {
			t.Fatalf("busy key k%d = %d after sweep, want 1", i, got)
		}
	}
}

func TestSweepIsBounded(t *testing.T) {
	t.Parallel()
	tb := New(Config{MaxKeys: 1 << 20, Shards: 64}, retireZero)
	for i := range 6400 {
		tb.Get(fmt.Sprint("k", i), 1)
	}
	removed := tb.Sweep(2, 1)
	if removed == 0 || removed > 400 {
		t.Fatalf("Sweep(budget 1) removed %d, want one shard's worth (~100)", removed)
	}
	total := removed
	for range 64 {
		total += tb.Sweep(2, 1)
	}
	if total != 6400 || tb.Len() != 0 {
		t.Fatalf("64 more one-shard sweeps: removed %d in all, Len %d; want 6400, 0", total, tb.Len())
	}
}

func TestCapEvictsLeastRecentlyUsed(t *testing.T) {
	t.Parallel()
	const capacity = 1000
	tb := New(Config{MaxKeys: capacity, Shards: 1}, retireZero)
	now := int64(0)
	tick := func() int64 { now += 2 * touchGranularity; return now }
	for i := range capacity {
		tb.Get(fmt.Sprint("k", i), tick())
	}
	// Keys 0..499 are used again: they are now the most recent.
	for i := range capacity / 2 {
		tb.Get(fmt.Sprint("k", i), tick())
	}
	for i := range capacity / 4 {
		tb.Get(fmt.Sprint("new", i), tick())
	}
	if got := tb.Len(); got != capacity {
		t.Fatalf("Len() = %d, want the cap %d", got, capacity)
	}
	if got := tb.Evicted(); got != capacity/4 {
		t.Fatalf("Evicted() = %d, want %d", got, capacity/4)
	}
	// Sampled LRU: almost every victim must come from the cold half.
	hotLost := 0
	for i := range capacity / 2 {
		key := fmt.Sprint("k", i)
		h := tb.hash(key)
		sh := tb.shardOf(h)
		sh.mu.RLock()
		ok := sh.ix.get(h, key) != nil
		sh.mu.RUnlock()
		if !ok {
			hotLost++
		}
	}
	// A victim is hot only when all 8 sampled keys are. The cold keys run
	// out as they are evicted (500 → 250 of 1000), so that chance grows from
	// 0.4% to 10% (0.75^8): about 10 of 250 in expectation, and over 25 in a
	// few percent of runs. Random eviction would lose about 150.
	if hotLost > capacity/4/5 {
		t.Fatalf("%d of %d evictions hit recently used keys, want <= 20%%", hotLost, capacity/4)
	}
}

func TestSmallCapIsExact(t *testing.T) {
	t.Parallel()
	tb := New(Config{MaxKeys: 10}, retireZero)
	for i := range 100 {
		tb.Get(fmt.Sprint("k", i), int64(i))
	}
	if tb.Len() != 10 || tb.Cap() != 10 || tb.Evicted() != 90 {
		t.Fatalf("Len %d Cap %d Evicted %d, want 10 10 90", tb.Len(), tb.Cap(), tb.Evicted())
	}
}

func TestRetiredEntryIsReplaced(t *testing.T) {
	t.Parallel()
	tb := New(Config{}, retireZero)
	e := tb.Get("a", 1)
	if !e.RetireWordIf(func(int64) bool { return true }) {
		t.Fatal("RetireWordIf(always) = false")
	}
	// Still mapped, but Get must not hand out a dead entry.
	if got := add(tb, "a", 2, 5); got != 5 {
		t.Fatalf("add after retire = %d, want 5 on a fresh entry", got)
	}
	if tb.Len() != 1 {
		t.Fatalf("Len() = %d, want 1", tb.Len())
	}
}

type logState struct{ hits []int64 }

func TestUpdateLockedSeesFreshStateAfterRetire(t *testing.T) {
	t.Parallel()
	retire := func(e *Entry[logState], _ int64) bool {
		return e.RetireLockedIf(func(s *logState) bool { return len(s.hits) == 0 })
	}
	tb := New(Config{}, retire)
	n := UpdateLocked(tb, "a", 1, func(s *logState) int { s.hits = append(s.hits, 1); return len(s.hits) })
	if n != 1 {
		t.Fatalf("first append: len %d, want 1", n)
	}
	if removed := tb.Sweep(2, 100); removed != 0 {
		t.Fatalf("Sweep removed a busy locked entry")
	}
	tb.Get("a", 3).kill()
	n = UpdateLocked(tb, "a", 4, func(s *logState) int { s.hits = append(s.hits, 1); return len(s.hits) })
	if n != 1 {
		t.Fatalf("append after kill: len %d, want 1 (fresh state)", n)
	}
}

// TestSweepNeverLosesAnUpdate races takes against a sweep that retires every
// entry it sees. Every increment must be found either in a live entry or in
// the word an entry had when it was retired: an increment applied to an
// entry after its retirement would be lost, which is the race the Dead
// protocol prevents.
func TestSweepNeverLosesAnUpdate(t *testing.T) {
	t.Parallel()
	var retiredSum atomic.Int64
	// retire is RetireWordIf(always) that also records the retired word.
	retire := func(e *Entry[struct{}], _ int64) bool {
		for {
			w := e.Word.Load()
			if w == Dead {
				return true
			}
			if e.Word.CompareAndSwap(w, Dead) {
				retiredSum.Add(w)
				return true
			}
		}
	}
	tb := New(Config{MaxKeys: 1 << 20, Shards: 4}, retire)
	const workers, perWorker, keys = 4, 5000, 8
	var wg sync.WaitGroup
	stop := make(chan struct{})
	var sweeps sync.WaitGroup
	sweeps.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
				tb.Sweep(0, 1<<30)
			}
		}
	})
	for w := range workers {
		wg.Go(func() {
			for i := range perWorker {
				add(tb, fmt.Sprint("k", (w+i)%keys), int64(i), 1)
			}
		})
	}
	wg.Wait()
	close(stop)
	sweeps.Wait()
	live := int64(0)
	for i := range keys {
		live += add(tb, fmt.Sprint("k", i), 0, 0)
	}
	if got, want := live+retiredSum.Load(), int64(workers*perWorker); got != want {
		t.Fatalf("live %d + retired %d = %d increments, want %d", live, retiredSum.Load(), got, want)
	}
}

func TestConcurrentInsertsRespectCap(t *testing.T) {
	t.Parallel()
	tb := New(Config{MaxKeys: 64, Shards: 1}, retireZero)
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for i := range 2000 {
				add(tb, fmt.Sprint(w, "-", i), int64(i), 1)
			}
		})
	}
	wg.Wait()
	if tb.Len() > 64 {
		t.Fatalf("Len() = %d over cap 64", tb.Len())
	}
}

func TestGetAllocatesNothingForExistingKey(t *testing.T) {
	tb := New(Config{}, retireZero)
	tb.Get("account:42", 1)
	allocs := testing.AllocsPerRun(100, func() { add(tb, "account:42", 2, 1) })
	if allocs != 0 {
		t.Fatalf("UpdateWord on an existing key allocates %v times, want 0", allocs)
	}
}

func TestLookupWithoutInsertLeavesTableAlone(t *testing.T) {
	t.Parallel()
	tb := New(Config{MaxKeys: 4, Shards: 1}, retireZero)
	add(tb, "real", 1, 3)
	for i := range 100 {
		e := tb.Lookup(fmt.Sprint("peek", i), 2, false)
		if e.Word.Load() != 0 {
			t.Fatalf("Lookup(absent) word = %d, want a fresh 0", e.Word.Load())
		}
	}
	if tb.Len() != 1 || tb.Evicted() != 0 {
		t.Fatalf("after 100 peeks: Len %d Evicted %d, want 1 0", tb.Len(), tb.Evicted())
	}
	if e := tb.Lookup("real", 3, false); e.Word.Load() != 3 {
		t.Fatalf("Lookup(present) word = %d, want 3", e.Word.Load())
	}
	if tb.Lookup("new", 4, true); tb.Len() != 2 {
		t.Fatalf("Lookup(insert) did not insert: Len %d", tb.Len())
	}
}

func TestOnFirstKeyOnlyWhenEmpty(t *testing.T) {
	t.Parallel()
	var calls atomic.Int64
	tb := New(Config{MaxKeys: 100, OnFirstKey: func() { calls.Add(1) }}, retireZero)
	tb.Lookup("peek", 1, false) // a peek inserts nothing
	if got := calls.Load(); got != 0 {
		t.Fatalf("OnFirstKey after a peek: %d calls, want 0", got)
	}
	tb.Get("a", 1)
	tb.Get("b", 1)
	tb.Get("a", 2)
	if got := calls.Load(); got != 1 {
		t.Fatalf("OnFirstKey after inserting a, b into an empty table: %d calls, want 1", got)
	}
	if removed := tb.Sweep(3, 1<<30); removed != 2 {
		t.Fatalf("Sweep removed %d, want 2", removed)
	}
	tb.Get("c", 4)
	if got := calls.Load(); got != 2 {
		t.Fatalf("OnFirstKey after the table emptied and took c: %d calls, want 2", got)
	}
}

func TestGetEachFindsAndInsertsEveryKey(t *testing.T) {
	t.Parallel()
	tb := New(Config{MaxKeys: 10_000, Shards: 16}, retireZero)
	for i := 0; i < 300; i += 2 { // the even keys exist, with word i
		add(tb, fmt.Sprint("k", i), 1, int64(i))
	}
	tb.Delete("k10") // retired: GetEach must not hand out the dead entry
	keys := make([]string, 300)
	for i := range keys {
		keys[i] = fmt.Sprint("k", i)
	}
	keys[7] = "k4" // a key twice in one call gets the same entry
	var sc EachScratch[struct{}]
	for round := range 2 { // the second round reuses the scratch
		got := make([]*Entry[struct{}], len(keys))
		tb.GetEach(len(keys), func(i int) string { return keys[i] }, 2, &sc, func(i int, e *Entry[struct{}]) {
			if got[i] != nil {
				t.Errorf("round %d: fn called twice for %d", round, i)
			}
			got[i] = e
		})
		for i, e := range got {
			if e == nil || e.Dead() {
				t.Fatalf("round %d: key %q: entry %v, want a live one", round, keys[i], e)
			}
			if e != tb.Get(keys[i], 3) {
				t.Fatalf("round %d: key %q: GetEach's entry is not Get's", round, keys[i])
			}
			want, n := int64(0), 0
			fmt.Sscanf(keys[i], "k%d", &n)
			if n%2 == 0 && n != 10 {
				want = int64(n)
			}
			if e.Word.Load() != want {
				t.Fatalf("key %q: word %d, want %d", keys[i], e.Word.Load(), want)
			}
		}
		if n := tb.Len(); n != 299 {
			t.Fatalf("round %d: Len %d after GetEach, want 299 (every distinct key once)", round, n)
		}
	}
	tb.GetEach(0, nil, 4, nil, func(int, *Entry[struct{}]) { t.Fatal("fn called for no keys") })
}
