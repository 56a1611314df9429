package client

import (
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/shardlimiter/shardlimiter/api/lease"
	"github.com/shardlimiter/shardlimiter/internal/poll"
)

// BenchmarkLeaseCheck: 32 goroutines of one client checking one hot key
// that the client holds a lease of, so that nearly every check is decided
// in-process (one atomic CAS). checks/s is the rate of Check calls;
// local% the share decided from the lease. A fake owner grants without
// limit, so the figure is the client's alone.
//
//	go test ./client -bench Lease -run '^$'
func BenchmarkLeaseCheck(b *testing.B) {
	b.Run("leases=on", func(b *testing.B) { benchHotKey(b, true) })
	// The same checks without leases: each goes to the (fake) owner over
	// gRPC, merged into shared RPCs.
	b.Run("leases=off", func(b *testing.B) { benchHotKey(b, false) })
}

func benchHotKey(b *testing.B, leases bool) {
	fc, gs, _ := leaseCluster(b, 1, lease.Anyone, nil)
	gs[0].budget.Store(1 << 50)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	c, err := New(ctx, Config{Targets: fc.addrs(), Leases: leases, LeaseThreshold: 1})
	cancel()
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	waitRing(b, c, 1)
	chk := leaseCheck("hot", 1_000_000_000)
	poll.Until(b, 10*time.Second, func() bool {
		_, _ = c.Check(context.Background(), chk)
		return !leases || c.LeaseStats().Held > 0
	}, "a lease")
	before := c.LeaseStats().Decided
	b.SetParallelism(max(1, 32/runtime.GOMAXPROCS(0)))
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		ctx := context.Background()
		for pb.Next() {
			if _, err := c.Check(ctx, chk); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "checks/s")
	b.ReportMetric(100*float64(c.LeaseStats().Decided-before)/float64(b.N), "local%")
}
