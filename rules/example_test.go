package rules_test

import (
	"fmt"

	"github.com/shardlimiter/shardlimiter/rules"
)

func Example() {
	set, err := rules.Parse("config.yaml", []byte(`
domain: messaging
descriptors:
  - key: message_type
    value: marketing
    descriptors:
      - key: to_number
        rate_limit: {unit: day, requests_per_unit: 5}
  - key: to_number
    rate_limits:                      # an extension: several limits
      - {unit: minute, requests_per_unit: 10, algorithm: TOKEN_BUCKET, burst: 20}
      - {unit: month, requests_per_unit: 1000}   # calendar month, UTC
`))
	if err != nil {
		fmt.Println(err)
		return
	}
	m, ok := set.Match("messaging", []rules.Entry{{Key: "to_number", Value: "2061111111"}})
	fmt.Println(ok, m.Key)
	for _, l := range m.Limits {
		fmt.Println(l.Name, l.Rule.Limit, l.Unit, l.Rule.Algorithm, l.Rule.Calendar)
	}
	_, ok = set.Match("messaging", []rules.Entry{{Key: "message_type", Value: "marketing"}})
	fmt.Println(ok)

	_, err = rules.Parse("config.yaml", []byte("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n"))
	fmt.Println(err)
	// Output:
	// true 9:messaging9:to_number=10:2061111111
	// messaging.to_number#0 10 minute TOKEN_BUCKET NONE
	// messaging.to_number#1 1000 month FIXED_WINDOW MONTH
	// false
	// rules: config.yaml:4: unknown unit "fortnight"
}
