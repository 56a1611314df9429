package ring

import (
	"strconv"
	"sync/atomic"
	"testing"
)

// Run: go test -run '^$' -bench . -benchmem -benchtime=1s ./ring/

// benchKeys is a pool of distinct keys, built before the timer starts so
// that the loop measures the lookup, not key formatting. Its size is a power
// of two so the loop can mask instead of divide.
func benchKeys() []string {
	keys := make([]string, 4096)
	for i := range keys {
		keys[i] = "account:" + strconv.Itoa(i*7919)
	}
	return keys
}

func BenchmarkOwner(b *testing.B) {
	s := mustNew(b, namedMembers(10), Config{})
	keys := benchKeys()
	var sink Member
	b.Run("spread", func(b *testing.B) {
		i := 0
		for b.Loop() {
			sink = s.Owner(keys[i&(len(keys)-1)])
			i++
		}
	})
	b.Run("hot", func(b *testing.B) {
		for b.Loop() {
			sink = s.Owner("account:42")
		}
	})
	_ = sink
}

// BenchmarkOwnerParallel is the request path: every goroutine loads the
// current snapshot from a shared atomic pointer and routes a key with it.
func BenchmarkOwnerParallel(b *testing.B) {
	var r atomic.Pointer[Snapshot]
	r.Store(mustNew(b, namedMembers(10), Config{}))
	keys := benchKeys()
	b.RunParallel(func(pb *testing.PB) {
		var sink Member
		i := 0
		for pb.Next() {
			sink = r.Load().Owner(keys[i&(len(keys)-1)])
			i++
		}
		_ = sink
	})
}

// BenchmarkNew is the cost of a rebuild on a membership change.
func BenchmarkNew(b *testing.B) {
	for _, n := range []int{3, 10, 50} {
		members := namedMembers(n)
		b.Run("members="+strconv.Itoa(n), func(b *testing.B) {
			for b.Loop() {
				if _, err := New(members, 1, Config{}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
