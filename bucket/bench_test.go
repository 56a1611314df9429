package bucket

import (
	"fmt"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shardlimiter/shardlimiter/limit"
	"github.com/shardlimiter/shardlimiter/table"
)

// Benchmarks run every algorithm on the optimized table and the reference,
// as sub-benchmarks, so that the two can be compared:
//
//	go test -run '^$' -bench . -benchmem -benchtime 1s -count 5 ./bucket/
//	go test -run '^$' -bench HeapPerKey -benchtime 1x ./bucket/

var benchCases = []struct {
	name  string
	impls []impl
	rule  limit.Rule
}{
	{"token", tokenImpls, limit.Rule{Limit: 1000, Period: sec}},
	{"leaky", leakyImpls, limit.Rule{Algorithm: limit.LeakyBucket, Limit: 1000, Period: sec, Burst: 100}},
	{"warmup", tokenImpls, limit.Rule{Limit: 1000, Period: sec, Warmup: 10 * sec}},
}

// BenchmarkTake is one decision on an existing key, one goroutine. Each
// call is 1 ms after the previous one at 1000 per second, so it is admitted
// and writes the key's state.
func BenchmarkTake(b *testing.B) {
	for _, c := range benchCases {
		for _, im := range c.impls {
			b.Run(c.name+"/"+im.name, func(b *testing.B) {
				l := im.new()
				now := t0
				l.Take("account:42", now, c.rule, 1)
				b.ReportAllocs()
				for b.Loop() {
					now += int64(ms)
					l.Take("account:42", now, c.rule, 1)
				}
			})
		}
	}
}

// BenchmarkTakeParallel is decisions from all Ps: on one hot key (every
// call contends for the same word or mutex; at a call per microsecond per
// goroutine it is mostly over its limit, as a hot key is), and spread over
// 65536 keys (mostly admitted).
func BenchmarkTakeParallel(b *testing.B) {
	keys := make([]string, 1<<16)
	for i := range keys {
		keys[i] = fmt.Sprintf("account:%010d", i)
	}
	for _, c := range benchCases {
		for _, im := range c.impls {
			b.Run("hot/"+c.name+"/"+im.name, func(b *testing.B) {
				l := im.new()
				b.ReportAllocs()
				b.RunParallel(func(pb *testing.PB) {
					for now := t0; pb.Next(); now += int64(time.Microsecond) {
						l.Take("account:42", now, c.rule, 1)
					}
				})
			})
			b.Run("spread/"+c.name+"/"+im.name, func(b *testing.B) {
				l := im.new()
				for _, k := range keys {
					l.Take(k, t0, c.rule, 1)
				}
				var seq atomic.Uint64
				b.ReportAllocs()
				b.ResetTimer()
				b.RunParallel(func(pb *testing.PB) {
					i := seq.Add(1) * 7919
					for now := t0; pb.Next(); now += int64(ms) {
						i++
						l.Take(keys[i&(1<<16-1)], now, c.rule, 1)
					}
				})
			})
		}
	}
}

// BenchmarkTakeTracked is the optimized tables with TrackChanges, drained
// every drainEvery takes (per goroutine) as a replicator would: on one
// key, a take costs one load of its mark but once per drain, when it
// marks the key and queues it; spread over 65,536 keys, nearly every take
// is the first to change its key since the drain.
func BenchmarkTakeTracked(b *testing.B) {
	keys := make([]string, 1<<16)
	for i := range keys {
		keys[i] = fmt.Sprintf("account:%010d", i)
	}
	tracked := func(r limit.Rule) limit.Limiter {
		if r.Algorithm == limit.LeakyBucket {
			return NewLeakyBucket(table.Config{TrackChanges: true})
		}
		return NewTokenBucket(table.Config{TrackChanges: true})
	}
	// woken is tracked with the wake-up hook a node sets: a send on a
	// channel of capacity 1 that nobody drains here (while a round is
	// under way, the node's replicator drains it once per round).
	woken := func(r limit.Rule) limit.Limiter {
		wake := make(chan struct{}, 1)
		cfg := table.Config{TrackChanges: true, OnChange: func() {
			select {
			case wake <- struct{}{}:
			default:
			}
		}}
		if r.Algorithm == limit.LeakyBucket {
			return NewLeakyBucket(cfg)
		}
		return NewTokenBucket(cfg)
	}
	drain := func(l limit.Limiter) { l.Changed(1<<20, func(string) {}) }
	for _, c := range benchCases {
		b.Run("one/"+c.name, func(b *testing.B) {
			l := tracked(c.rule)
			now := t0
			l.Take(keys[0], now, c.rule, 1)
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				now += int64(ms)
				l.Take(keys[0], now, c.rule, 1)
				if i++; i%drainEvery == 0 {
					drain(l)
				}
			}
		})
		b.Run("spread/"+c.name, func(b *testing.B) { spreadTracked(b, tracked(c.rule), keys, c.rule, drain) })
		b.Run("spread-woken/"+c.name, func(b *testing.B) { spreadTracked(b, woken(c.rule), keys, c.rule, drain) })
	}
}

// spreadTracked takes keys from parallel goroutines, draining the changes
// every drainEvery takes.
func spreadTracked(b *testing.B, l limit.Limiter, keys []string, rule limit.Rule, drain func(limit.Limiter)) {
	for _, k := range keys {
		l.Take(k, t0, rule, 1)
	}
	var seq atomic.Uint64
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := seq.Add(1) * 7919
		for n, now := 1, t0; pb.Next(); n, now = n+1, now+int64(ms) {
			i++
			l.Take(keys[i&(1<<16-1)], now, rule, 1)
			if n%drainEvery == 0 {
				drain(l)
			}
		}
	})
}

// drainEvery is how many takes BenchmarkTakeTracked makes between drains.
const drainEvery = 4096

// BenchmarkHeapPerKey reports the live heap of a table holding 1,000,000
// keys of 18 bytes ("account:0000000123"), default config (MaxKeys 1M), as
// B/key and MiB per million keys. It measures, it does not assert.
func BenchmarkHeapPerKey(b *testing.B) {
	const n = 1_000_000
	for _, c := range benchCases {
		for _, im := range c.impls {
			b.Run(c.name+"/"+im.name, func(b *testing.B) {
				var perKey float64
				var held int
				for b.Loop() {
					perKey, held = heapPerKey(im, c.rule, n)
				}
				b.ReportMetric(perKey, "B/key")
				b.ReportMetric(perKey*1e6/(1<<20), "MiB/1Mkeys")
				b.ReportMetric(float64(held), "keys")
			})
		}
	}
}

// heapPerKey returns the heap growth per key held after taking on n keys,
// and how many the table holds (the key cap may have evicted a few).
func heapPerKey(im impl, r limit.Rule, n int) (float64, int) {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	l := im.new()
	buf := []byte("account:")
	for i := range n {
		key := strconv.AppendInt(buf[:8], int64(1_000_000_000+i), 10)
		key[8] = '0'
		l.Take(string(key), t0, r, 1)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	held := l.Len()
	runtime.KeepAlive(l)
	return float64(after.HeapAlloc-before.HeapAlloc) / float64(held), held
}
