package table

import (
	"fmt"
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
