package table

import (
	"fmt"
	"sync"
	"testing"
)

// Warm changes nothing: an absent key stays absent, a held one keeps its
// entry and word; and it is safe beside writers that insert, grow, delete
// and sweep the shards it reads. (Under the race detector Warm does
// nothing: this test checks it without.)
func TestWarmChangesNothing(t *testing.T) {
	tb := New[int](Config{MaxKeys: 1 << 16, Shards: 4}, func(e *Entry[int], now int64) bool {
		return e.RetireWordIf(func(w int64) bool { return w == 0 })
	})
	keys := make([]string, 2000)
	for i := range keys {
		keys[i] = fmt.Sprint("key", i)
	}
	held := keys[:1000]
	for i, k := range held {
		tb.Get(k, 1).Word.Store(int64(i + 1))
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // writers on other keys: inserts that grow, sweeps that delete
		defer wg.Done()
		for round := range 20 {
			for i := range 500 {
				tb.Get(fmt.Sprint("churn", round, ".", i), 1)
			}
			tb.Sweep(2, 1<<16)
		}
	}()
	for range 200 {
		for j := 0; j < len(keys); j += WarmMax {
			tb.Warm(keys[j:min(j+WarmMax, len(keys))])
		}
	}
	wg.Wait()
	for i, k := range held {
		if e := tb.Peek(k); e == nil || e.Word.Load() != int64(i+1) {
			t.Fatalf("held key %s changed: %v", k, e)
		}
	}
	for _, k := range keys[1000:] {
		if tb.Peek(k) != nil {
			t.Fatalf("absent key %s was inserted", k)
		}
	}
}
