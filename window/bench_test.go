package window

import (
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shardlimiter/shardlimiter/limit"
	"github.com/shardlimiter/shardlimiter/table"
)

// Benchmarks: go test -run '^$' -bench . -benchmem -benchtime=1s ./window/
// (BenchmarkHeapPerKey: -bench HeapPerKey -benchtime=1x.)

// benchRule is 4000 hits per second (packed for every algorithm); the
// benchmarks offer 8000 per second, so about half the takes are admitted,
// and simulated time moves at a pace where the table refreshes a hot
// key's last-use time every few takes, as it would in real time.
func benchRule(alg limit.Algorithm) limit.Rule {
	return limit.Rule{Algorithm: alg, Limit: 4000, Period: time.Second}
}

const benchStep = int64(time.Second) / 8000

// benchImpls returns the optimized table of alg, with the default key cap,
// and its reference.
func benchImpls(alg limit.Algorithm) []impl {
	refs := map[limit.Algorithm]func() limit.Limiter{
		limit.FixedWindow:   func() limit.Limiter { return newRefFixed() },
		limit.SlidingWindow: func() limit.Limiter { return newRefSliding() },
		limit.SlidingLog:    func() limit.Limiter { return newRefLog() },
	}
	return []impl{
		{"optimized", func() limit.Limiter { return newTable(alg, table.Config{}) }},
		{"tracked", func() limit.Limiter { return newTable(alg, table.Config{TrackChanges: true}) }},
		{"reference", refs[alg]},
	}
}

var benchAlgs = []limit.Algorithm{limit.FixedWindow, limit.SlidingWindow, limit.SlidingLog}

// BenchmarkTake is one decision on an existing key, one goroutine.
func BenchmarkTake(b *testing.B) {
	for _, alg := range benchAlgs {
		for _, im := range benchImpls(alg) {
			b.Run(alg.String()+"/"+im.name, func(b *testing.B) {
				l, r := im.new(), benchRule(alg)
				now := t0
				l.Take("account:42", now, r, 1)
				for b.Loop() {
					now += benchStep
					l.Take("account:42", now, r, 1)
				}
			})
		}
	}
}

// BenchmarkTakeParallel runs decisions from all Ps: on one hot key, and
// spread over 65,536 keys.
func BenchmarkTakeParallel(b *testing.B) {
	keys := make([]string, 1<<16)
	for i := range keys {
		keys[i] = fmt.Sprintf("account:%012d", i)
	}
	for _, alg := range benchAlgs {
		for _, im := range benchImpls(alg) {
			for _, spread := range []bool{false, true} {
				name := alg.String() + "/hot/" + im.name
				if spread {
					name = alg.String() + "/spread/" + im.name
				}
				b.Run(name, func(b *testing.B) {
					l, r := im.new(), benchRule(alg)
					var seq atomic.Uint64
					b.RunParallel(func(pb *testing.PB) {
						i := seq.Add(1) * 7919
						now := t0
						for pb.Next() {
							i++
							now += benchStep
							key := keys[0]
							if spread {
								key = keys[i&(1<<16-1)]
							}
							l.Take(key, now, r, 1)
						}
					})
				})
			}
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
		keys[i] = fmt.Sprintf("account:%012d", i)
	}
	for _, alg := range benchAlgs {
		b.Run(alg.String()+"/one", func(b *testing.B) {
			l, r := newTable(alg, table.Config{TrackChanges: true}), benchRule(alg)
			now := t0
			l.Take(keys[0], now, r, 1)
			i := 0
			for b.Loop() {
				now += benchStep
				l.Take(keys[0], now, r, 1)
				if i++; i%drainEvery == 0 {
					l.Changed(1<<20, func(string) {})
				}
			}
		})
		b.Run(alg.String()+"/spread", func(b *testing.B) {
			l, r := newTable(alg, table.Config{TrackChanges: true}), benchRule(alg)
			for _, k := range keys {
				l.Take(k, t0, r, 1)
			}
			var seq atomic.Uint64
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				i := seq.Add(1) * 7919
				now := t0
				for n := 1; pb.Next(); n++ {
					i++
					now += benchStep
					l.Take(keys[i&(1<<16-1)], now, r, 1)
					if n%drainEvery == 0 {
						l.Changed(1<<20, func(string) {})
					}
				}
			})
		})
	}
}

// drainEvery is how many takes BenchmarkTakeTracked makes between drains.
const drainEvery = 4096

// BenchmarkHeapPerKey reports the heap held per key with 1,000,000 keys of
// 20 bytes: FIXED_WINDOW and SLIDING_WINDOW after one take each,
// SLIDING_LOG (limit 10) after three takes of one hit.
func BenchmarkHeapPerKey(b *testing.B) {
	const n = 1_000_000
	for _, alg := range benchAlgs {
		b.Run(alg.String(), func(b *testing.B) {
			r := limit.Rule{Algorithm: alg, Limit: 100, Period: time.Minute}
			takes := 1
			if alg == limit.SlidingLog {
				r.Limit, takes = 10, 3
			}
			for b.Loop() {
				var before, after runtime.MemStats
				runtime.GC()
				runtime.ReadMemStats(&before)
				l := newTable(alg, table.Config{MaxKeys: 2 * n})
				buf := make([]byte, 0, 32)
				for t := range takes {
					for i := range n {
						buf = fmt.Appendf(buf[:0], "account:%012d", i)
						l.Take(string(buf), t0+int64(t)*int64(time.Millisecond), r, 1)
					}
				}
				runtime.GC()
				runtime.ReadMemStats(&after)
				if l.Len() != n {
					b.Fatalf("Len() = %d, want %d", l.Len(), n)
				}
				b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/n, "B/key")
				b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/(1<<20), "MiB")
				runtime.KeepAlive(l)
			}
		})
	}
}

func newTable(alg limit.Algorithm, cfg table.Config) limit.Limiter {
	switch alg {
	case limit.FixedWindow:
		return NewFixed(cfg)
	case limit.SlidingWindow:
		return NewSliding(cfg)
	}
	return NewLog(cfg)
}
