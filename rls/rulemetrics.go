package rls

import (
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/shardlimiter/shardlimiter/internal/cowmap"
	"github.com/shardlimiter/shardlimiter/limit"
	"github.com/shardlimiter/shardlimiter/rules"
)

// Per-rule statistics of the rules file, as envoyproxy/ratelimit keeps per
// descriptor: for each limit, the hits of the descriptors it decided, as
// total_hits, over_limit, near_limit, within_limit and shadow_mode (the
// stat label). The labels are the domain and the limit's name: its name in
// the file, or the descriptor path the reference names its stats by
// (domain.key1_value1.key2, with #i for the i-th of rate_limits). The
// series are bounded by the rules file; a rule with detailed_metric: true
// keeps its statistics per descriptor value (domain.key1_v1.key2_v2) when
// Config.MetricsMaxDetailed allows, up to that many series, beyond which
// its values are counted under the rule's own name.
//
// They count on the node that answered Envoy (each request once). Hits
// follow the reference:
//
//   - total_hits: every hit asked for.
//   - over_limit: the hits of a descriptor answered OVER_LIMIT by the limit.
//   - within_limit: the hits of a descriptor the limit did not refuse.
//   - near_limit: of the hits within the limit, those that took the count
//     past 80% of the limit (the count after them is limit − remaining).
//     The reference also counts as near_limit the part of an over-limit
//     request's hits that was still below the limit; here a refused
//     answer carries no count, so all its hits are over_limit.
//   - shadow_mode: the over_limit hits of a rule in shadow_mode, answered OK.
//
// Descriptors that carry their own limit (limit override) are not counted
// here (their statistics would be keyed by request values); the node's
// per-rule metrics count them under their override_<unit> names.

// Statistics, the values of the stat label.
const (
	statTotal = iota
	statOver
	statNear
	statWithin
	statShadow
	numStats
)

var statNames = [numStats]string{"total_hits", "over_limit", "near_limit", "within_limit", "shadow_mode"}

// nearLimitRatio is the reference's near-limit threshold.
const nearLimitRatio = 0.8

type ruleKey struct{ domain, rule string }

type ruleStats [numStats]prometheus.Counter

// ruleMetrics are the per-rule statistics. The counters of a (domain,
// rule) are bound on first use and published in a copy-on-write map
// (internal/cowmap), so a descriptor costs one lookup without a lock.
type ruleMetrics struct {
	vec         *prometheus.CounterVec
	stats       cowmap.Map[ruleKey, *ruleStats] // bounded by the rules file and maxDetailed
	maxDetailed int
	detailed    int // detailed series bound so far; guarded by stats (its bind)
	folded      prometheus.Counter
	limits      *prometheus.Desc
	store       *rules.Store
}

func newRuleMetrics(store *rules.Store, maxDetailed int) *ruleMetrics {
	rm := &ruleMetrics{
		maxDetailed: maxDetailed,
		store:       store,
		vec: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "shardlimiter", Subsystem: "rls", Name: "rule_hits_total",
			Help: "Hits of the descriptors each limit of the rules file decided, as envoyproxy/ratelimit's per-descriptor stats (stat: total_hits, over_limit, near_limit, within_limit, shadow_mode), by domain and rule (the limit's name, or its descriptor path).",
		}, []string{"domain", "rule", "stat"}),
		folded: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "shardlimiter", Subsystem: "rls", Name: "detailed_folded_total",
			Help: "Descriptors of detailed_metric rules counted under their rule's name because --metrics-max-detailed series were taken.",
		}),
		limits: prometheus.NewDesc("shardlimiter_rules_limit_per_second",
			"Each limit of the rules in force, in hits per second (requests_per_unit over its unit), by domain and rule as shardlimiter_rls_rule_hits_total: rate(hits) / limit is the utilisation of a rule with one counter.",
			[]string{"domain", "rule"}, nil),
	}
	return rm
}

func (rm *ruleMetrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{rm.vec, rm.folded, limitsCollector{rm}}
}

// lookup returns the counters of k; detailed series count against the
// detailed cap, and past it lookup returns nil.
func (rm *ruleMetrics) lookup(k ruleKey, detailed bool) *ruleStats {
	st, _ := rm.stats.LoadOrAdd(k, func() (*ruleStats, bool) {
		if detailed {
			if rm.detailed >= rm.maxDetailed {
				return nil, false
			}
			rm.detailed++
		}
		st := &ruleStats{}
		for i, name := range statNames {
			st[i] = rm.vec.WithLabelValues(k.domain, k.rule, name)
		}
		return st, true
	})
	return st
}

// record counts descriptor d of a request for domain, decided by rs (the
// results of its checks; nil for a blocked descriptor).
func (rm *ruleMetrics) record(domain string, d *desc, rs []limit.Result) {
	if !d.matched {
		return
	}
	for j, l := range d.limits {
		st := rm.statsOf(domain, d, j, l)
		hits := d.hits
		st[statTotal].Add(float64(hits))
		var r limit.Result // a blocked limit (requests_per_unit 0) refuses every hit
		if rs != nil {
			r = rs[j]
		}
		// Refused by this limit: in a refused group the other limits
		// answer refused too, with their remaining covering the hits.
		if !r.Allowed && r.Remaining < max(hits, 1) {
			st[statOver].Add(float64(hits))
			if d.shadow {
				st[statShadow].Add(float64(hits))
			}
			continue
		}
		st[statWithin].Add(float64(hits))
		lim := l.Rule.Limit
		near := int64(float64(lim) * nearLimitRatio)
		after := lim - r.Remaining
		if before := after - hits; after > near {
			st[statNear].Add(float64(min(hits, after-max(near, before))))
		}
	}
}

// statsOf returns the counters of d's j-th limit l.
func (rm *ruleMetrics) statsOf(domain string, d *desc, j int, l rules.Limit) *ruleStats {
	if d.detailed != "" && rm.maxDetailed > 0 {
		name := d.detailed
		if len(d.limits) > 1 || strings.Contains(l.Name, "#") {
			name += "#" + l.Name[strings.LastIndexByte(l.Name, '#')+1:]
		}
		if st := rm.lookup(ruleKey{domain, name}, true); st != nil {
			return st
		}
		rm.folded.Inc()
	}
	return rm.lookup(ruleKey{domain, l.Name}, false)
}

// detailedName is the statistics name of a detailed_metric descriptor:
// the domain and each entry as key_value, as the reference names them.
func detailedName(domain string, entries []rules.Entry) string {
	var b strings.Builder
	b.WriteString(domain)
	for _, e := range entries {
		b.WriteByte('.')
		b.WriteString(e.Key)
		if e.Value != "" {
			b.WriteByte('_')
			b.WriteString(e.Value)
		}
	}
	return b.String()
}

// limitsCollector reports the limits of the rules in force at scrape time.
type limitsCollector struct{ rm *ruleMetrics }

func (c limitsCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.rm.limits }

func (c limitsCollector) Collect(ch chan<- prometheus.Metric) {
	if c.rm.store == nil {
		return
	}
	seen := map[ruleKey]bool{}
	c.rm.store.Load().EachLimit(func(domain string, l rules.Limit) {
		k := ruleKey{domain, l.Name}
		if seen[k] || l.Rule.Period <= 0 {
			return // a name used twice: the first limit of that name speaks for it
		}
		seen[k] = true
		ch <- prometheus.MustNewConstMetric(c.rm.limits, prometheus.GaugeValue,
			float64(l.Rule.Limit)/l.Rule.Period.Seconds(), domain, l.Name)
	})
}
