package limit_test

import (
	"fmt"
	"time"

	"github.com/shardlimiter/shardlimiter/limit"
)

func ExampleCheck_Validate() {
	// 100 requests a minute for account 42, with bursts of up to 20.
	c := limit.Check{
		Name: "api_per_minute",
		Key:  "account:42",
		Hits: 1,
		Rule: limit.Rule{Algorithm: limit.TokenBucket, Limit: 100, Period: time.Minute, Burst: 20},
	}
	fmt.Println(c.Validate(), c.Rule.Capacity())

	// Options that do not fit the algorithm are refused with the field's name.
	c.Rule.Algorithm = limit.FixedWindow
	fmt.Println(c.Validate())
	// Output:
	// <nil> 20
	// burst applies to TOKEN_BUCKET and LEAKY_BUCKET only, not FIXED_WINDOW
}

func ExampleFailed() {
	r := limit.Failed(limit.Invalid, fmt.Errorf("unique_key is empty"))
	fmt.Println(r.Allowed, r.Reason, r.Error)
	// Output:
	// false invalid_argument unique_key is empty
}
