package limit

import (
	"strings"
	"testing"
	"time"
)

func TestGubernatorValidate(t *testing.T) {
	t.Parallel()
	ok := Check{Name: "n", Key: "k", Hits: -5, Rule: Rule{Algorithm: GubernatorLeakyBucket, Behavior: Reset | DrainOverLimit, CreatedAt: 1}}
	if err := ok.Validate(); err != nil {
		t.Fatalf("Validate(%+v) = %v: limit 0, duration 0 and negative hits are gubernator's", ok, err)
	}
	cases := []struct {
		mod  func(c *Check)
		want string
	}{
		{func(c *Check) { c.Rule.Limit = -1 }, "limit must be in [0,"},
		{func(c *Check) { c.Hits = MaxGubernatorCount + 1 }, "hits must be in"},
		{func(c *Check) { c.Rule.Period = time.Millisecond + 1 }, "whole milliseconds"},
		{func(c *Check) { c.Rule.Behavior = CountRejected }, "unknown behavior flags 0x2"},
		{func(c *Check) { c.Rule.CreatedAt = -1 }, "created_at must be in"},
		{func(c *Check) { c.Rule.Warmup = time.Second }, "do not apply"},
		{func(c *Check) {
			c.Rule.Behavior, c.Rule.Period = Gregorian, GregorianWeeks*time.Millisecond
		}, "GregorianWeeks` not yet supported"},
		{func(c *Check) { c.Rule.Behavior, c.Rule.Period = Gregorian, 6*time.Millisecond }, "not a valid gregorian interval"},
	}
	for _, tc := range cases {
		c := ok
		tc.mod(&c)
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Validate(%+v) = %v, want %q", c, err, tc.want)
		}
	}
	if !GubernatorTokenBucket.Gubernator() || TokenBucket.Gubernator() || GubernatorLeakyBucket.String() != "GUBERNATOR_LEAKY_BUCKET" {
		t.Error("Gubernator() or String() is wrong")
	}
}
