package bucket

import (
	"fmt"
	"math/rand/v2"
	"syscall"
	"testing"
	"time"

	"github.com/shardlimiter/shardlimiter/limit"
	"github.com/shardlimiter/shardlimiter/table"
)

// BenchmarkTakeKeys is one token-bucket decision on a table of 100,000 or
// 1,000,000 keys, one goroutine, the key drawn uniformly or by Zipf
// (s = 1.1, as the load tool's --dist zipf): what the table's lookup costs
// once the keys no longer fit in the caches; cpu-ns/check is the process's
// CPU per check, steadier than ns/check on a shared machine. The keys look like a node's
// table keys (rule name, then the unique key). For cache misses:
//
//	go test -c -o /tmp/bucket.test ./bucket/
//	perf stat -e cache-misses,instructions /tmp/bucket.test -test.run '^$' -test.bench 'TakeKeys/1000000/uniform' -test.benchtime 5000000x
func BenchmarkTakeKeys(b *testing.B) {
	rule := limit.Rule{Limit: limit.MaxLimit, Period: sec}
	for _, n := range []int{100_000, 1_000_000} {
		keys := make([]string, n)
		for i := range keys {
			keys[i] = fmt.Sprintf("\x0eapi_per_minuteaccount:%d", i)
		}
		l := NewTokenBucket(table.Config{MaxKeys: 2 * n})
		for _, k := range keys {
			l.Take(k, t0, rule, 1)
		}
		for _, dist := range []string{"uniform", "zipf"} {
			order := keyOrder(dist, n, 1<<20)
			b.Run(fmt.Sprintf("%d/%s", n, dist), func(b *testing.B) {
				now, i := t0, 0
				b.ReportAllocs()
				cpu := cpuTime()
				for b.Loop() {
					now += int64(ms)
					l.Take(keys[order[i&(len(order)-1)]], now, rule, 1)
					i++
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N), "ns/check")
				b.ReportMetric(float64(cpuTime()-cpu)/float64(b.N), "cpu-ns/check")
			})
			// As a node decides a batch: the keys of each next warmWindow
			// checks warmed (Warm), then taken.
			b.Run(fmt.Sprintf("%d/%s/warm", n, dist), func(b *testing.B) {
				now, i := t0, 0
				var window [warmWindow]string
				b.ReportAllocs()
				cpu := cpuTime()
				for b.Loop() {
					now += int64(ms)
					if i%warmWindow == 0 {
						for j := range window {
							window[j] = keys[order[(i+j)&(len(order)-1)]]
						}
						l.Warm(window[:])
					}
					l.Take(keys[order[i&(len(order)-1)]], now, rule, 1)
					i++
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N), "ns/check")
				b.ReportMetric(float64(cpuTime()-cpu)/float64(b.N), "cpu-ns/check")
			})
		}
	}
}

// warmWindow is how many checks' keys the warm rows warm at a time, as
// peer does.
const warmWindow = 16

// cpuTime returns the process's user and system CPU time so far: on a
// machine shared with other work, the CPU a loop used says more than the
// time it took (cpu-ns/check beside ns/check).
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// keyOrder is m key indices below n, drawn by dist with a fixed seed; the
// Zipf ranks are scattered over the keys, as a hot key's place in the
// table has nothing to do with its rank.
func keyOrder(dist string, n, m int) []uint32 {
	r := rand.New(rand.NewPCG(1, 2))
	out := make([]uint32, m)
	if dist == "uniform" {
		for i := range out {
			out[i] = uint32(r.IntN(n))
		}
		return out
	}
	z := rand.NewZipf(r, 1.1, 1, uint64(n-1))
	perm := r.Perm(n)
	for i := range out {
		out[i] = uint32(perm[z.Uint64()])
	}
	return out
}

// BenchmarkSweepHeld is one sweep of a table of 33,000 or 1,000,000 keys
// that are all still in use (a limit per hour), so that it removes none:
// what an idle node holding keys spends per sweep. cpu-ns/key is the
// process's CPU per key visited.
func BenchmarkSweepHeld(b *testing.B) {
	rule := limit.Rule{Limit: 1000, Period: time.Hour}
	for _, n := range []int{33_000, 1_000_000} {
		l := NewTokenBucket(table.Config{MaxKeys: 2 * n})
		for i := range n {
			l.Take(fmt.Sprintf("\x0eapi_per_minuteaccount:%d", i), t0, rule, 1)
		}
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			cpu := cpuTime()
			for b.Loop() {
				if removed := l.Sweep(t0+int64(sec), 2*n); removed != 0 {
					b.Fatalf("Sweep removed %d keys in use", removed)
				}
			}
			b.ReportMetric(float64(cpuTime()-cpu)/float64(b.N*n), "cpu-ns/key")
		})
	}
}
