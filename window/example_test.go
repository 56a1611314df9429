package window_test

import (
	"fmt"
	"time"

	"github.com/shardlimiter/shardlimiter/limit"
	"github.com/shardlimiter/shardlimiter/table"
	"github.com/shardlimiter/shardlimiter/window"
)

// start is a minute boundary (14 November 2023 22:14 UTC).
var start = time.Date(2023, 11, 14, 22, 14, 0, 0, time.UTC).UnixNano()

func at(d time.Duration) int64 { return start + int64(d) }

// A fixed window admits Limit hits per aligned window, even when they come
// in two bursts on either side of a boundary.
func ExampleFixed() {
	fixed := window.NewFixed(table.Config{})
	rule := limit.Rule{Algorithm: limit.FixedWindow, Limit: 10, Period: time.Minute}

	d := fixed.Take("account:42", at(59*time.Second), rule, 10)
	fmt.Println("10 at 0:59:", d.Allowed, "remaining", d.Remaining)
	d = fixed.Take("account:42", at(59*time.Second), rule, 1)
	fmt.Println("1 more at 0:59:", d.Allowed, "retry after", d.RetryAfter)
	d = fixed.Take("account:42", at(time.Minute), rule, 10)
	fmt.Println("10 at 1:00:", d.Allowed, "remaining", d.Remaining)
	// Output:
	// 10 at 0:59: true remaining 0
	// 1 more at 0:59: false retry after 1s
	// 10 at 1:00: true remaining 0
}

// The sliding-window counter weighs the previous window's count by the
// part of it still inside the sliding period: 9 hits in the previous
// window, and 25% into the current one a check of 5 hits sees
// 9×0.75 + 5 = 11.75 > 10.
func ExampleSliding() {
	sliding := window.NewSliding(table.Config{})
	rule := limit.Rule{Algorithm: limit.SlidingWindow, Limit: 10, Period: time.Minute}

	sliding.Take("account:42", at(30*time.Second), rule, 9)
	d := sliding.Take("account:42", at(time.Minute+15*time.Second), rule, 5)
	fmt.Println("5 at 1:15:", d.Allowed, "remaining", d.Remaining, "retry after", d.RetryAfter.Round(time.Millisecond))
	d = sliding.Take("account:42", at(time.Minute+15*time.Second)+int64(d.RetryAfter), rule, 5)
	fmt.Println("5 then:", d.Allowed, "remaining", d.Remaining)
	// Output:
	// 5 at 1:15: false remaining 3 retry after 11.667s
	// 5 then: true remaining 0
}

// The sliding log is exact; with a MinInterval it also spaces actions. A
// check of several hits is one action.
func ExampleLog() {
	log := window.NewLog(table.Config{})
	rule := limit.Rule{Algorithm: limit.SlidingLog, Limit: 3, Period: 10 * time.Second, MinInterval: time.Second}

	for _, t := range []time.Duration{0, 500 * time.Millisecond, time.Second, 2 * time.Second, 10 * time.Second} {
		d := log.Take("account:42", at(t), rule, 1)
		fmt.Printf("at %v: allowed %v, remaining %d, retry after %v\n", t, d.Allowed, d.Remaining, d.RetryAfter)
	}
	// Output:
	// at 0s: allowed true, remaining 2, retry after 0s
	// at 500ms: allowed false, remaining 2, retry after 500ms
	// at 1s: allowed true, remaining 1, retry after 0s
	// at 2s: allowed true, remaining 0, retry after 0s
	// at 10s: allowed true, remaining 0, retry after 0s
}
