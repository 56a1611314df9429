package table

import (
	"fmt"
	"sync"
	"testing"
)

// blob is a state that holds heap bytes of its own, like a log.
type blob struct{ buf []byte }

func (b *blob) HeapBytes() int64 { return int64(cap(b.buf)) }

func retireBlob(e *Entry[blob], _ int64) bool {
	return e.RetireLockedIf(func(s *blob) bool { return len(s.buf) == 0 })
}

// grow gives key's blob n more bytes the way an algorithm must: charge
// under the entry's mutex, reclaim after it.
func grow(tb *Table[blob], key string, now int64, n int) {
	for {
		e := tb.Get(key, now)
		e.Mu.Lock()
		if e.Dead() {
			e.Mu.Unlock()
			continue
		}
		before := e.State.HeapBytes()
		e.State.buf = append(e.State.buf, make([]byte, n)...)
		tb.AddStateBytes(e.State.HeapBytes() - before)
		e.Mu.Unlock()
		tb.Reclaim(e)
		return
	}
}

func TestBudgetBoundsTablesTogether(t *testing.T) {
	t.Parallel()
	b := NewBudget(64 << 10)
	words := New(Config{Budget: b}, retireZero)
	blobs := New(Config{Budget: b}, retireBlob)
	for i := range 5000 {
		now := int64(i+1) * 2 * touchGranularity
		if i%2 == 0 {
			add(words, fmt.Sprint("w", i), now, 1)
		} else {
			grow(blobs, fmt.Sprint("b", i), now, 100)
		}
		if b.Held() > b.Max() {
			t.Fatalf("after %d inserts Held() = %d, want <= Max() = %d", i+1, b.Held(), b.Max())
		}
		if got := words.Bytes() + blobs.Bytes(); got != b.Held() {
			t.Fatalf("after %d inserts the tables hold %d bytes, the budget %d", i+1, got, b.Held())
		}
	}
	if words.EvictedForBytes() == 0 || blobs.EvictedForBytes() == 0 {
		t.Fatalf("evicted for bytes: words %d, blobs %d; want both > 0", words.EvictedForBytes(), blobs.EvictedForBytes())
	}
	if words.Evicted() != 0 || blobs.Evicted() != 0 {
		t.Fatalf("evicted for the key cap: %d, %d; want 0", words.Evicted(), blobs.Evicted())
	}
}

// TestBudgetEvictsLeastRecentlyUsedOfAnyTable fills one table with old
// keys and another with new ones: the budget must make room from the old
// ones. Sampled LRU is approximate, so it compares halves, not keys.
func TestBudgetEvictsLeastRecentlyUsedOfAnyTable(t *testing.T) {
	t.Parallel()
	old := New(Config{}, retireZero)
	cost := old.keyCost("old0000")
	b := NewBudget(2000 * cost)
	old = New(Config{Budget: b}, retireZero)
	young := New(Config{Budget: b}, retireZero)
	for i := range 2000 {
		add(old, fmt.Sprintf("old%04d", i), int64(i+1)*2*touchGranularity, 1)
	}
	base := int64(10_000) * 2 * touchGranularity
	for i := range 1000 {
		add(young, fmt.Sprintf("new%04d", i), base+int64(i)*2*touchGranularity, 1)
	}
	if young.Len() != 1000 {
		t.Fatalf("young table kept %d of 1000 keys, want all: the old table held the least recently used", young.Len())
	}
	kept := func(from, to int) (n int) {
		for i := from; i < to; i++ {
			if old.Peek(fmt.Sprintf("old%04d", i)) != nil {
				n++
			}
		}
		return n
	}
	if o, n := kept(0, 1000), kept(1000, 2000); o >= n {
		t.Fatalf("old table kept %d of its older half and %d of its newer half; want fewer of the older", o, n)
	}
}

func TestBudgetCreditsEveryWayAKeyLeaves(t *testing.T) {
	t.Parallel()
	b := NewBudget(1 << 30)
	tb := New(Config{MaxKeys: 64, Budget: b}, retireBlob)
	for i := range 200 { // over the key cap: evictions
		grow(tb, fmt.Sprint("k", i), int64(i+1), 10+i)
	}
	if tb.Evicted() == 0 {
		t.Fatal("no key was evicted for the key cap")
	}
	tb.Range(func(key string) bool {
		if len(key)%2 == 0 {
			tb.Delete(key)
		} else {
			UpdateLocked(tb, key, 1<<40, func(s *blob) int { s.buf = s.buf[:0]; return 0 })
		}
		return true
	})
	tb.Sweep(1<<41, 1<<30)
	if tb.Len() != 0 || tb.Bytes() != 0 || b.Held() != 0 {
		t.Fatalf("after deleting and sweeping everything: Len %d, Bytes %d, budget Held %d; want 0, 0, 0", tb.Len(), tb.Bytes(), b.Held())
	}
}

func TestBudgetKeepsAKeyLargerThanItself(t *testing.T) {
	t.Parallel()
	b := NewBudget(100)
	tb := New(Config{Budget: b}, retireBlob)
	grow(tb, "huge", 1, 1000) // must return, not evict its own key forever
	if tb.Peek("huge") == nil {
		t.Fatal("the one key over the budget was evicted under its own insert")
	}
	grow(tb, "next", 2, 1)
	if tb.Peek("huge") != nil {
		t.Fatal("the key over the budget stayed when another came")
	}
}

func TestBudgetUnderConcurrency(t *testing.T) {
	t.Parallel()
	b := NewBudget(32 << 10)
	tables := []*Table[blob]{New(Config{Budget: b}, retireBlob), New(Config{Budget: b}, retireBlob)}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 2000 {
				grow(tables[i%2], fmt.Sprint(g, "/", i%500), int64(i+1)*touchGranularity, 8)
			}
		})
	}
	wg.Wait()
	if got := tables[0].Bytes() + tables[1].Bytes(); got != b.Held() {
		t.Fatalf("tables hold %d bytes, the budget %d", got, b.Held())
	}
	// Every goroutine ended with a reclaim that it ran or that waited
	// for the running one past an eighth over; a last small overshoot
	// is one key per goroutine.
	if limit := b.Max() + b.Max()/8 + 8*tables[0].keyCost("7/499") + 8*64; b.Held() > limit {
		t.Fatalf("Held() = %d after the inserts, want <= %d", b.Held(), limit)
	}
}
