package main

import (
	"fmt"
	"strings"

	"github.com/shardlimiter/shardlimiter/limit"
)

// parseAlgorithms reads --algorithm: one name, a comma list (each once,
// in the order given) or all; names are case-insensitive.
func parseAlgorithms(s string) ([]limit.Algorithm, error) {
	if strings.EqualFold(strings.TrimSpace(s), "all") {
		return limit.Algorithms(), nil
	}
	var out []limit.Algorithm
	for _, name := range strings.Split(s, ",") {
		a, ok := algorithmNamed(strings.TrimSpace(name))
		if !ok {
			return nil, fmt.Errorf("--algorithm: unknown algorithm %q (want TOKEN_BUCKET, LEAKY_BUCKET, FIXED_WINDOW, SLIDING_WINDOW, SLIDING_LOG, a comma list of them, or all)", name)
		}
		for _, seen := range out {
			if seen == a {
				return nil, fmt.Errorf("--algorithm: %v is listed twice", a)
			}
		}
		out = append(out, a)
	}
	return out, nil
}

func algorithmNamed(name string) (limit.Algorithm, bool) {
	for _, a := range limit.Algorithms() {
		if strings.EqualFold(name, a.String()) {
			return a, true
		}
	}
	return 0, false
}

func (c *config) validateRule(bad func(string, ...any), set map[string]bool) {
	if c.hits < 0 {
		bad("--hits: want >= 0, got %d", c.hits)
	}
	if c.mode == modeAccuracy {
		c.validateAccuracy(bad)
	} else if len(c.algorithms) > 1 {
		bad("--algorithm: several algorithms are for accuracy mode only; a throughput run measures one")
	}
	for _, a := range c.algorithms {
		r := c.ruleFor(a)
		if len(c.algorithms) == 1 {
			r.Burst = c.rule.Burst // an explicit --burst must fit the one algorithm
		}
		if err := (limit.Check{Name: ruleName, Key: "k", Hits: c.hits, Rule: r}).Validate(); err != nil {
			bad("rule for %v: %v (check --limit, --period, --burst, --hits)", a, err)
			return
		}
	}
}

// ruleFor returns the rule of a run of algorithm a: --burst applies to the
// buckets only, so that --algorithm all stays valid.
func (c *config) ruleFor(a limit.Algorithm) limit.Rule {
	r := c.rule
	r.Algorithm = a
	if a != limit.TokenBucket && a != limit.LeakyBucket {
		r.Burst = 0
	}
	return r
}
