package table

import (
	"fmt"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
)

func BenchmarkUpdateWordExisting(b *testing.B) {
	tb := New(Config{}, retireZero)
	tb.Get("account:42", 1)
	for b.Loop() {
		add(tb, "account:42", 2, 1)
	}
}

func BenchmarkUpdateWordParallel(b *testing.B) {
	keys := make([]string, 1<<16)
	for i := range keys {
		keys[i] = fmt.Sprint("account:", i)
	}
	b.Run("hot", func(b *testing.B) {
		tb := New(Config{}, retireZero)
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				add(tb, "account:42", 2, 1)
			}
		})
	})
	b.Run("spread", func(b *testing.B) {
		tb := New(Config{}, retireZero)
		var seq atomic.Uint64
		b.RunParallel(func(pb *testing.PB) {
			i := seq.Add(1) * 7919
			for pb.Next() {
				i++
				add(tb, keys[i&(1<<16-1)], 2, 1)
			}
		})
	})
}

// BenchmarkChargedVersusHeap reports, for keys of 18 and of 1,000 bytes,
// the live heap per key of a table and what the budget charges per key
// (Table.Bytes), so that the estimate can be checked against the heap. It
// measures, it does not assert:
//
//	go test -run '^$' -bench ChargedVersusHeap -benchtime 1x ./table/
func BenchmarkChargedVersusHeap(b *testing.B) {
	for _, c := range []struct {
		name   string
		n, len int
	}{{"key18", 1_000_000, 18}, {"key1000", 200_000, 1000}} {
		b.Run(c.name, func(b *testing.B) {
			var heap, charged float64
			for b.Loop() {
				var before, after runtime.MemStats
				runtime.GC()
				runtime.ReadMemStats(&before)
				tb := New(Config{MaxKeys: c.n, Budget: NewBudget(1 << 40)}, func(*Entry[[24]byte], int64) bool { return false })
				pad := strings.Repeat("x", c.len-10)
				for i := range c.n {
					tb.Get(fmt.Sprintf("%s%010d", pad, i), 1)
				}
				runtime.GC()
				runtime.ReadMemStats(&after)
				heap = float64(after.HeapAlloc-before.HeapAlloc) / float64(tb.Len())
				charged = float64(tb.Bytes()) / float64(tb.Len())
				runtime.KeepAlive(tb)
			}
			b.ReportMetric(heap, "heapB/key")
			b.ReportMetric(charged, "chargedB/key")
		})
	}
}
