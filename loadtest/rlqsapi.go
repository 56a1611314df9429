package main

import (
	"errors"
	"flag"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// --api rlqs plays Envoy instances against Envoy's Rate Limit Quota
// Service (docs/RLQS.md): each instance opens a stream to a target (the
// instances spread over the targets), offers its demand of requests per
// second to one bucket, admits them with the token bucket it was last
// assigned as Envoy does, and reports allowed and denied every
// --rlqs-interval. The report gives admitted ÷ limit second by second,
// Jain's fairness index among the constrained instances, the time (and
// reports) the assignments took to converge after --rlqs-shift, and the
// capacity used (rlqsrun.go, rlqssim.go).
const apiRLQS = "rlqs"

// rlqsConfig is the command line of --api rlqs.
type rlqsConfig struct {
	demands  []float64     // per instance, requests per second
	shiftAt  time.Duration // 0: no shift
	shiftTo  []float64
	interval time.Duration
	limit    float64 // the rule's limit, requests per second
	domain   string
	tenant   string          // the bucket_id's tenant
	expired  expiredBehavior // the instances' expired_assignment_behavior
	rawDem   string
	rawShift string
}

func defineRLQSFlags(fs *flag.FlagSet, c *rlqsConfig) {
	fs.StringVar(&c.rawDem, "rlqs-demand", "10,10,1000,1000,1000,1000", "--api rlqs: requests per second each Envoy instance offers, one number per instance")
	fs.StringVar(&c.rawShift, "rlqs-shift", "", "--api rlqs: `OFFSET:D1,D2,…` the instances' demands from OFFSET into the run (as many as --rlqs-demand); empty: no shift")
	fs.DurationVar(&c.interval, "rlqs-interval", 5*time.Second, "--api rlqs: how often each instance reports (Envoy: about 5s); whole seconds; with --local the nodes get it as --rlqs-report-interval")
	fs.Float64Var(&c.limit, "rlqs-limit", 600, "--api rlqs: the bucket's limit, requests per second; with --local it is written into the nodes' rules, with --targets it must be the servers' rule")
	fs.StringVar(&c.domain, "rlqs-domain", "edge", "--api rlqs: the domain of the streams")
	fs.StringVar(&c.expired.kind, "rlqs-expired", expiredDeny, "--api rlqs: each instance's expired_assignment_behavior once an assignment's TTL ends: deny or allow (fallback_rate_limit's blanket rule) or reuse (reuse_last_assignment)")
	fs.DurationVar(&c.expired.timeout, "rlqs-expired-timeout", time.Minute, "--api rlqs: its expired_assignment_behavior_timeout: after it the bucket is abandoned and the instance admits all (its no_assignment_behavior, ALLOW_ALL) until a new assignment; 0: at once, as Envoy does without one")
	fs.StringVar(&c.tenant, "rlqs-tenant", "loadtest", "--api rlqs: the value of the bucket_id's entry tenant (every instance reports on this one bucket)")
}

// validateRLQS parses and checks the --rlqs-* flags.
func (c *rlqsConfig) validate(bad func(string, ...any)) {
	var err error
	if c.demands, err = parseDemands(c.rawDem); err != nil {
		bad("--rlqs-demand: %v", err)
	}
	if c.rawShift != "" {
		at, list, ok := strings.Cut(c.rawShift, ":")
		if c.shiftAt, err = time.ParseDuration(at); !ok || err != nil || c.shiftAt <= 0 {
			bad("--rlqs-shift: want OFFSET:D1,D2,… with a positive OFFSET, got %q", c.rawShift)
		} else if c.shiftTo, err = parseDemands(list); err != nil {
			bad("--rlqs-shift: %v", err)
		} else if len(c.shiftTo) != len(c.demands) {
			bad("--rlqs-shift: %d demands for %d instances", len(c.shiftTo), len(c.demands))
		}
	}
	if c.interval < time.Second || c.interval%time.Second != 0 {
		bad("--rlqs-interval: want whole seconds, at least 1s, got %v", c.interval)
	}
	if k := c.expired.kind; k != expiredDeny && k != expiredAllow && k != expiredReuse {
		bad("--rlqs-expired: want deny, allow or reuse, got %q", k)
	}
	if c.expired.timeout < 0 {
		bad("--rlqs-expired-timeout: want ≥ 0, got %v", c.expired.timeout)
	}
	if c.limit <= 0 {
		bad("--rlqs-limit: want > 0, got %v", c.limit)
	}
	if c.domain == "" || c.tenant == "" {
		bad("--rlqs-domain and --rlqs-tenant must not be empty")
	}
}

func parseDemands(s string) ([]float64, error) {
	var out []float64
	for _, f := range strings.Split(s, ",") {
		d, err := strconv.ParseFloat(strings.TrimSpace(f), 64)
		if err != nil || d < 0 || d > 1e7 {
			return nil, fmt.Errorf("want comma-separated requests per second from 0 to 1e7, got %q", f)
		}
		out = append(out, d)
	}
	if len(out) == 0 || len(out) > 1000 {
		return nil, errors.New("want 1 to 1000 instances")
	}
	return out, nil
}

// maxMinShares divides limit among demands max-min fairly (the owner's
// rule, package quota): the demands under an equal share are met, the
// others split the rest.
func maxMinShares(limit float64, demands []float64) []float64 {
	shares := make([]float64, len(demands))
	left, open := limit, len(demands)
	done := make([]bool, len(demands))
	for open > 0 {
		equal := left / float64(open)
		progressed := false
		for i, d := range demands {
			if !done[i] && d <= equal {
				shares[i], done[i], left, open, progressed = d, true, left-d, open-1, true
			}
		}
		if !progressed {
			for i := range demands {
				if !done[i] {
					shares[i] = equal
				}
			}
			break
		}
	}
	return shares
}
