package bucket_test

import (
	"fmt"
	"time"

	"github.com/shardlimiter/shardlimiter/bucket"
	"github.com/shardlimiter/shardlimiter/limit"
	"github.com/shardlimiter/shardlimiter/table"
)

var start = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()

func ExampleTokenBucket() {
	tb := bucket.NewTokenBucket(table.Config{})
	rule := limit.Rule{Algorithm: limit.TokenBucket, Limit: 2, Period: time.Second}
	for i := range 3 {
		d := tb.Take("account:42", start, rule, 1)
		fmt.Printf("hit %d: allowed=%v remaining=%d retry_after=%v\n", i+1, d.Allowed, d.Remaining, d.RetryAfter)
	}
	d := tb.Take("account:42", start+int64(500*time.Millisecond), rule, 1)
	fmt.Printf("500ms later: allowed=%v remaining=%d\n", d.Allowed, d.Remaining)
	d = tb.Take("account:42", start, rule, 3)
	fmt.Printf("3 hits: allowed=%v retry_after=%v\n", d.Allowed, d.RetryAfter)
	// Output:
	// hit 1: allowed=true remaining=1 retry_after=0s
	// hit 2: allowed=true remaining=0 retry_after=0s
	// hit 3: allowed=false remaining=0 retry_after=500ms
	// 500ms later: allowed=true remaining=0
	// 3 hits: allowed=false retry_after=-1ns
}

func ExampleLeakyBucket() {
	lb := bucket.NewLeakyBucket(table.Config{})
	// 10 per second, a queue of 2 behind the slot in service.
	rule := limit.Rule{Algorithm: limit.LeakyBucket, Limit: 10, Period: time.Second, Burst: 2}
	for i := range 4 {
		d := lb.Take("account:42", start, rule, 1)
		fmt.Printf("call %d: allowed=%v delay=%v retry_after=%v\n", i+1, d.Allowed, d.Delay, d.RetryAfter)
	}
	// Output:
	// call 1: allowed=true delay=0s retry_after=0s
	// call 2: allowed=true delay=100ms retry_after=0s
	// call 3: allowed=true delay=200ms retry_after=0s
	// call 4: allowed=false delay=0s retry_after=100ms
}

// A cold key with a warm-up starts at a third of the stable rate: a client
// that retries after each RetryAfter is admitted 290ms apart at first, and
// 100ms apart once the 2 s warm-up is over.
func ExampleTokenBucket_warmup() {
	tb := bucket.NewTokenBucket(table.Config{})
	rule := limit.Rule{Algorithm: limit.TokenBucket, Limit: 10, Period: time.Second, Warmup: 2 * time.Second, Burst: 1}
	var spacing []time.Duration
	for now, last := start, int64(0); len(spacing) < 12; {
		d := tb.Take("account:42", now, rule, 1)
		if !d.Allowed {
			now += int64(d.RetryAfter)
			continue
		}
		if last != 0 {
			spacing = append(spacing, time.Duration(now-last))
		}
		last = now
	}
	fmt.Println(spacing)
	// Output:
	// [290ms 270ms 250ms 230ms 210ms 190ms 170ms 150ms 130ms 110ms 100ms 100ms]
}

// A key moves to another node with its state: the node it leaves exports
// it, the node it joins imports it (merging with what it may already
// hold), and the key goes on where it was rather than with a full bucket.
func ExampleTokenBucket_Export() {
	rule := limit.Rule{Algorithm: limit.TokenBucket, Limit: 2, Period: time.Second}
	leaving, joining := bucket.NewTokenBucket(table.Config{}), bucket.NewTokenBucket(table.Config{})
	leaving.Take("account:42", start, rule, 2)

	state, ok := leaving.Export("account:42", start)
	fmt.Println("exported:", ok)
	if err := joining.Import("account:42", state, start, true); err != nil {
		fmt.Println(err)
	}
	d := joining.Take("account:42", start, rule, 1)
	fmt.Printf("on the new node: allowed=%v retry_after=%v\n", d.Allowed, d.RetryAfter)

	// A state older than what the key holds changes nothing.
	joining.Take("account:42", start+int64(time.Second), rule, 2)
	_ = joining.Import("account:42", state, start+int64(time.Second), true)
	d = joining.Take("account:42", start+int64(time.Second), rule, 1)
	fmt.Printf("after a stale import: allowed=%v retry_after=%v\n", d.Allowed, d.RetryAfter)
	// Output:
	// exported: true
	// on the new node: allowed=false retry_after=500ms
	// after a stale import: allowed=false retry_after=500ms
}
