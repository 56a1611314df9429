// Package rulemetrics counts a node's decided checks by rule name and
// outcome, with a bounded number of names: the per-rule series of
// docs/ARCHITECTURE.md, "Per-rule metrics".
package rulemetrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/shardlimiter/shardlimiter/internal/cowmap"
	"github.com/shardlimiter/shardlimiter/limit"
)

// The checks a node decided, by rule name and outcome.
//
// A rule name comes from the caller, so its series are bounded: the first
// --metrics-max-rules names get series of their own, every later one is
// counted under rule="other" (and in a counter of such checks). The unique
// key never becomes a label.
//
// The counters of a name are bound once, when the name is first seen, and
// published in a copy-on-write map (internal/cowmap), so lookups take no
// lock. Only a new name (at most --metrics-max-rules times in the node's life)
// takes its mutex and copies the map. A batch sums its checks
// in a Tally and adds to the counters once per run of checks of one
// name: a batch of one rule costs one lookup and a few atomic adds,
// whatever its size (BenchmarkRuleMetricsRecord).

// DefaultMaxRules is the bound on names with series of their own when New
// is given 0.
const DefaultMaxRules = 1000

// OtherRule is the rule label of the names beyond the bound.
const OtherRule = "other"

// NearLimitRatio is envoyproxy/ratelimit's near-limit threshold: a check
// admitted with less than 1 − NearLimitRatio of the limit left is counted
// near the limit.
const NearLimitRatio = 0.8

// Outcomes of a decided check, the values of the outcome label. They
// partition the checks: every decided check is counted under exactly one.
const (
	outcomeUnder = iota // admitted, at least 20% of the limit left
	outcomeNear         // admitted, less than 20% of the limit left
	outcomeOver         // refused
	outcomePeek         // hits 0: reported, nothing consumed
	numOutcomes
)

var outcomeNames = [numOutcomes]string{"under", "near", "over", "peek"}

// ruleCounters are the bound counters of one rule label value.
type ruleCounters struct {
	checks [numOutcomes]prometheus.Counter
	hits   prometheus.Counter // hits admitted
}

// Metrics are the per-rule series of a node. Safe for concurrent use.
type Metrics struct {
	names  *cowmap.Map[string, *ruleCounters] // at most max names
	other  *ruleCounters
	folded prometheus.Counter
	checks *prometheus.CounterVec
	hits   *prometheus.CounterVec
	count  prometheus.GaugeFunc
}

// New returns the series of at most max names (0: DefaultMaxRules) beside
// OtherRule's; register Collectors.
func New(max int) *Metrics {
	if max <= 0 {
		max = DefaultMaxRules
	}
	rm := &Metrics{names: cowmap.New[string, *ruleCounters](max)}
	rm.checks = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "shardlimiter_rule_checks_total",
		Help: "Checks decided on this node (the owner), by rule name (the first --metrics-max-rules names; the rest under \"other\") and outcome: under (admitted, 20% or more of the limit left), near (admitted, less left), over (refused), peek (hits 0).",
	}, []string{"rule", "outcome"})
	rm.hits = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "shardlimiter_rule_hits_total",
		Help: "Hits admitted on this node, by rule name (as shardlimiter_rule_checks_total).",
	}, []string{"rule"})
	rm.folded = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "shardlimiter_rule_folded_checks_total",
		Help: "Checks counted under rule=\"other\" because --metrics-max-rules names already had series of their own.",
	})
	rm.count = prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "shardlimiter_rule_names",
		Help: "Rule names with series of their own (at most --metrics-max-rules).",
	}, func() float64 { return float64(rm.names.Len()) })
	rm.other = rm.bind(OtherRule)
	return rm
}

// Collectors are the series to register.
func (rm *Metrics) Collectors() []prometheus.Collector {
	return []prometheus.Collector{rm.checks, rm.hits, rm.folded, rm.count}
}

func (rm *Metrics) bind(name string) *ruleCounters {
	rc := &ruleCounters{hits: rm.hits.WithLabelValues(name)}
	for i, o := range outcomeNames {
		rc.checks[i] = rm.checks.WithLabelValues(name, o)
	}
	return rc
}

// lookup returns the counters of name, binding them when name is new and
// the cap allows, else the counters of OtherRule. A caller's own "other"
// shares the folded names' series.
func (rm *Metrics) lookup(name string) *ruleCounters {
	rc, ok := rm.names.LoadOrAdd(name, func() (*ruleCounters, bool) {
		if name == OtherRule {
			return nil, false
		}
		return rm.bind(name), true
	})
	if !ok {
		return rm.other
	}
	return rc
}

// Tally sums the outcomes of a run of checks of one name within a batch,
// so that a batch of many checks of one rule (the common case) costs one
// lookup and a few atomic adds rather than two per check. A node keeps one
// per batch and flushes it before the batch returns. Not safe for
// concurrent use.
type Tally struct {
	rm   *Metrics
	name string // aliases the batch's check: cleared by flush
	rc   *ruleCounters
	n    [numOutcomes]int64
	hits int64
}

// NewTally returns an empty tally of rm's series.
func (rm *Metrics) NewTally() Tally { return Tally{rm: rm} }

// Record counts one decided check.
func (t *Tally) Record(c *limit.Check, d *limit.Decision) {
	if t.rc == nil || c.Name != t.name {
		t.Flush()
		t.name, t.rc = c.Name, t.rm.lookup(c.Name)
	}
	t.n[outcomeOf(c, d)]++
	if d.Allowed {
		t.hits += c.Hits
	}
}

// Flush adds the run's counts to its counters and empties t.
func (t *Tally) Flush() {
	if t.rc == nil {
		return
	}
	var sum int64
	for i, v := range t.n {
		if v > 0 {
			t.rc.checks[i].Add(float64(v))
			sum += v
		}
	}
	if t.hits > 0 {
		t.rc.hits.Add(float64(t.hits))
	}
	if t.rc == t.rm.other && t.name != OtherRule {
		t.rm.folded.Add(float64(sum))
	}
	*t = Tally{rm: t.rm}
}

// outcomeOf classifies a decided check. Near: what is left after the
// check is below (1 − NearLimitRatio) of the limit, as envoyproxy/ratelimit
// counts near_limit.
func outcomeOf(c *limit.Check, d *limit.Decision) int {
	switch {
	case c.Hits == 0:
		return outcomePeek
	case !d.Allowed:
		return outcomeOver
	case d.Remaining*5 < c.Rule.Limit: // Remaining < (1 − 0.8) × Limit, in integers
		return outcomeNear
	}
	return outcomeUnder
}
