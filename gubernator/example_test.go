package gubernator_test

import (
	"fmt"
	"time"

	"github.com/shardlimiter/shardlimiter/gubernator"
	"github.com/shardlimiter/shardlimiter/limit"
)

// gubernator's TOKEN_BUCKET does not refill: the window starts at the first
// hit and ends duration later.
func ExampleTake() {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC).UnixMilli()
	var it gubernator.Item
	r := gubernator.Request{Algorithm: limit.GubernatorTokenBucket, Hits: 1, Limit: 2, Duration: 60_000}
	for i := range 3 {
		resp := gubernator.Take(&it, now+int64(i)*1000, r)
		fmt.Println(resp.Over, resp.Remaining, resp.ResetTime-now)
	}
	// Output:
	// false 1 60000
	// false 0 60000
	// true 0 60000
}
