package peer

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/shardlimiter/shardlimiter/limit"
)

// BenchmarkCheckLocalBatch100 measures a single node deciding 100-check
// batches of spread keys: validation, key building, routing and the table.
func BenchmarkCheckLocalBatch100(b *testing.B) {
	for _, a := range limit.Algorithms() {
		b.Run(a.String(), func(b *testing.B) {
			n, err := New(Config{Name: "solo"})
			if err != nil {
				b.Fatal(err)
			}
			batch := make([]limit.Check, 100)
			for i := range batch {
				batch[i] = limit.Check{Name: "api_per_minute", Key: fmt.Sprint("account:", i), Hits: 1,
					Rule: limit.Rule{Algorithm: a, Limit: limit.MaxLimit, Period: time.Second}}
				if a == limit.SlidingLog {
					batch[i].Rule.Limit = limit.MaxLogLimit
				}
			}
			ctx := context.Background()
			for b.Loop() {
				n.Check(ctx, batch)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(batch)), "ns/check")
		})
	}
}
