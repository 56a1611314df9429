package peer

import (
	"fmt"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/shardlimiter/shardlimiter/limit"
	"github.com/shardlimiter/shardlimiter/snapshot"
)

// snapshotKeys is the table size the snapshot benchmarks write and load.
const snapshotKeys = 1_000_000

// fillForSnapshot makes a node with a state dir and snapshotKeys fixed
// window keys of one hit each.
func fillForSnapshot(b *testing.B, dir string) *Node {
	b.Helper()
	clk := newClock()
	n, err := New(Config{Name: "bench", Now: clk.Now, StateDir: dir, MaxKeys: 2 * snapshotKeys})
	if err != nil {
		b.Fatal(err)
	}
	r := rule(limit.FixedWindow, 1000, time.Hour)
	now := clk.Now().UnixNano()
	l := n.limiters[limit.FixedWindow]
	for i := range snapshotKeys {
		l.Take(fmt.Sprintf("\x04rule%08d:account", i), now, r, 1)
	}
	return n
}

// cpuTime returns the process's user and system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkSnapshotWrite1M writes a snapshot of 1M keys: wall time per
// write (ns/op), CPU (cpu-ms/op, GC included) and the file's size.
func BenchmarkSnapshotWrite1M(b *testing.B) {
	dir := b.TempDir()
	n := fillForSnapshot(b, dir)
	b.ResetTimer()
	cpu := cpuTime()
	for b.Loop() {
		n.mv.dur.changed()
		n.mv.writeSnapshot()
	}
	b.ReportMetric(float64((cpuTime()-cpu).Milliseconds())/float64(b.N), "cpu-ms/op")
	if fi, err := os.Stat(snapshot.Path(dir, "bench")); err == nil {
		b.ReportMetric(float64(fi.Size())/(1<<20), "MiB")
	}
}

// BenchmarkSnapshotRestore1M restores a snapshot of 1M keys into an empty
// node.
func BenchmarkSnapshotRestore1M(b *testing.B) {
	dir := b.TempDir()
	n := fillForSnapshot(b, dir)
	n.mv.dur.changed()
	n.mv.writeSnapshot()
	clk := newClock()
	b.ResetTimer()
	cpu := cpuTime()
	for b.Loop() {
		m, err := New(Config{Name: "bench", Now: clk.Now, StateDir: dir, MaxKeys: 2 * snapshotKeys})
		if err != nil {
			b.Fatal(err)
		}
		if err := m.Restore(); err != nil {
			b.Fatal(err)
		}
		if got := m.limiters[limit.FixedWindow].Len(); got != snapshotKeys {
			b.Fatalf("restored %d keys, want %d", got, snapshotKeys)
		}
	}
	b.ReportMetric(float64((cpuTime()-cpu).Milliseconds())/float64(b.N), "cpu-ms/op")
}
