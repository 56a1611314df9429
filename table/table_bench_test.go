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

// BenchmarkInsert is the slow path: a new key into a full table, which
// evicts one for the key cap ("keycap"), or for a byte budget that the cap
// never reaches ("budget", sampled LRU across two tables).
func BenchmarkInsert(b *testing.B) {
	keys := make([]string, 1<<20)
	for i := range keys {
		keys[i] = fmt.Sprintf("account:%010d", i)
	}
	const held = 1 << 16
	for _, c := range []struct {
		name string
		cfg  func() Config
	}{
		{"keycap", func() Config { return Config{MaxKeys: held} }},
		{"budget", func() Config {
			tb := New(Config{}, retireZero)
			return Config{Budget: NewBudget(held * tb.keyCost(keys[0]))}
		}},
	} {
		b.Run(c.name, func(b *testing.B) {
			cfg := c.cfg()
			tb := New(cfg, retireZero)
			New(cfg, retireZero) // a second, empty table on the same budget
			for i := range held {
				tb.Get(keys[i], int64(i))
			}
			i := held
			b.ReportAllocs()
			for b.Loop() {
				tb.Get(keys[i&(len(keys)-1)], int64(i))
				i++
			}
		})
	}
}
