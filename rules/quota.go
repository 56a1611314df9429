package rules

import (
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// The rlqs section of a domain: the buckets of Envoy's Rate Limit Quota
// Service (RLQS). Envoy names a bucket by a map, its bucket_id; a quota
// rule lists entries (key, and an exact or wildcard value, or the key
// alone) that a bucket_id must all hold for the rule to apply, others
// entries of the bucket_id being ignored. Rules are tried in file order;
// the first that matches wins. Each value of a key-only or wildcard
// entry is a bucket of its own, limited on its own (as descriptor values
// are counters of their own).
//
//	domain: edge
//	rlqs:
//	  default: allow          # allow, deny or none (the default)
//	  buckets:
//	    - name: per_tenant
//	      entries:
//	        - key: tenant
//	      rate_limit: {unit: second, requests_per_unit: 100}

// QuotaDefault is what a domain's buckets that match no quota rule get.
type QuotaDefault uint8

const (
	// QuotaNone assigns nothing: Envoy applies its no_assignment_behavior.
	QuotaNone QuotaDefault = iota
	// QuotaAllow assigns ALLOW_ALL.
	QuotaAllow
	// QuotaDeny assigns DENY_ALL.
	QuotaDeny
)

var quotaDefaults = map[string]QuotaDefault{"none": QuotaNone, "allow": QuotaAllow, "deny": QuotaDeny}

// String returns the default as written in the file.
func (d QuotaDefault) String() string {
	for name, v := range quotaDefaults {
		if v == d {
			return name
		}
	}
	return "unknown"
}

// QuotaMatch is what a bucket_id of an RLQS report matched.
type QuotaMatch struct {
	// Rule is the quota rule's name; "" when no rule matched (see Default).
	Rule string
	// Key identifies the bucket: the domain, the rule and the bucket_id's
	// entries the rule matched, each length-prefixed. The ring routes on
	// it.
	Key string
	// PerSecond is the rule's limit in requests per second.
	PerSecond float64
	// Default is the domain's default: what a bucket no rule matches
	// gets, and what a matched bucket falls back to when its owner cannot
	// be reached and its last assignment has ended.
	Default QuotaDefault
}

// quotaSection is a domain's rlqs section.
type quotaSection struct {
	dflt  QuotaDefault
	rules []*quotaRule
	line  int
}

// quotaRule is one entry of an rlqs section's buckets.
type quotaRule struct {
	name    string
	entries []*node // key, value (or pattern) of each entry; rule and next unused
	limit   Limit
	line    int
}

var (
	quotaFields     = []string{"default", "buckets"}
	quotaRuleFields = []string{"name", "entries", "rate_limit"}
	quotaEntryField = []string{"key", "value"}
)

// quota reads a domain's rlqs section; nil when it has none.
func (p *parser) quota(n *yaml.Node, domain string) (*quotaSection, error) {
	if n == nil || isNull(resolve(n)) {
		return nil, nil
	}
	f, err := p.mapping(n, "rlqs", quotaFields)
	if err != nil {
		return nil, err
	}
	q := &quotaSection{line: resolve(n).Line}
	text, err := p.str(f["default"].val, "default")
	if err != nil {
		return nil, err
	}
	if text != "" {
		d, ok := quotaDefaults[strings.ToLower(text)]
		if !ok {
			return nil, p.errf(f["default"].val, "unknown rlqs default %q: want allow, deny or none", text)
		}
		q.dflt = d
	}
	items, err := p.sequence(f["buckets"].val, "buckets")
	if err != nil {
		return nil, err
	}
	names := map[string]bool{}
	for _, item := range items {
		r, err := p.quotaRule(item, domain)
		if err != nil {
			return nil, err
		}
		if names[r.name] {
			return nil, p.errf(resolve(item), "duplicate rlqs bucket rule name %q", r.name)
		}
		names[r.name] = true
		q.rules = append(q.rules, r)
	}
	return q, nil
}

// quotaRule reads one rule of an rlqs section.
func (p *parser) quotaRule(n *yaml.Node, domain string) (*quotaRule, error) {
	f, err := p.mapping(n, "an rlqs bucket rule", quotaRuleFields)
	if err != nil {
		return nil, err
	}
	r := &quotaRule{line: resolve(n).Line}
	if r.name, err = p.str(f["name"].val, "name"); err != nil {
		return nil, err
	}
	if r.name == "" {
		return nil, p.errf(resolve(n), "an rlqs bucket rule needs a name")
	}
	items, err := p.sequence(f["entries"].val, "entries")
	if err != nil {
		return nil, err
	}
	if len(items) == 0 {
		return nil, p.errf(resolve(n), "rlqs bucket rule %q has no entries", r.name)
	}
	for _, item := range items {
		e, err := p.quotaEntry(item)
		if err != nil {
			return nil, err
		}
		r.entries = append(r.entries, e)
	}
	if f["rate_limit"].key == nil {
		return nil, p.errf(resolve(n), "rlqs bucket rule %q has no rate_limit", r.name)
	}
	rf, err := p.mapping(f["rate_limit"].val, "a rate limit", []string{"unit", "requests_per_unit"})
	if err != nil {
		return nil, err
	}
	if r.limit.Rule, r.limit.Unit, err = p.limitRule(resolve(f["rate_limit"].val), rf); err != nil {
		return nil, err
	}
	r.limit.Name, r.limit.Named = domain+"."+r.name, true
	return r, nil
}

// quotaEntry reads one entry of a quota rule.
func (p *parser) quotaEntry(n *yaml.Node) (*node, error) {
	f, err := p.mapping(n, "an rlqs entry", quotaEntryField)
	if err != nil {
		return nil, err
	}
	e := &node{line: resolve(n).Line}
	if e.key, err = p.str(f["key"].val, "key"); err != nil {
		return nil, err
	}
	if e.key == "" {
		return nil, p.errf(resolve(n), "an rlqs entry needs a key")
	}
	if e.value, err = p.str(f["value"].val, "value"); err != nil {
		return nil, err
	}
	if strings.Contains(e.value, "*") {
		e.parts = strings.Split(e.value, "*")
	}
	return e, nil
}

// matchesBucket returns the value bucket holds for e.key and whether
// it matches e.
func (e *node) matchesBucket(bucket map[string]string) (string, bool) {
	v, ok := bucket[e.key]
	switch {
	case !ok:
		return "", false
	case e.parts != nil:
		return v, wildcardMatch(e.parts, v)
	case e.value != "":
		return v, v == e.value
	}
	return v, true
}

// MatchQuota returns what a bucket_id of an RLQS report for domain
// matches: the first quota rule of the domain whose entries the bucket_id
// all holds, or the domain's default (QuotaNone for a domain without an
// rlqs section or an unknown domain).
func (s *Set) MatchQuota(domain string, bucket map[string]string) QuotaMatch {
	if s == nil {
		return QuotaMatch{}
	}
	d := s.domains[domain]
	if d == nil || d.quota == nil {
		return QuotaMatch{}
	}
	for _, r := range d.quota.rules {
		if key, ok := r.match(domain, bucket); ok {
			return QuotaMatch{Rule: r.name, Key: key, PerSecond: float64(r.limit.Rule.Limit) / r.limit.Rule.Period.Seconds(), Default: d.quota.dflt}
		}
	}
	return QuotaMatch{Default: d.quota.dflt}
}

// match returns the bucket's key when bucket holds all of r's entries.
func (r *quotaRule) match(domain string, bucket map[string]string) (string, bool) {
	var b strings.Builder
	put := func(s string) {
		b.WriteString(strconv.Itoa(len(s)))
		b.WriteByte(':')
		b.WriteString(s)
	}
	b.WriteString("rlqs:")
	put(domain)
	put(r.name)
	keys := make([]string, 0, len(r.entries))
	values := map[string]string{}
	for _, e := range r.entries {
		v, ok := e.matchesBucket(bucket)
		if !ok {
			return "", false
		}
		keys = append(keys, e.key)
		values[e.key] = v
	}
	slices.Sort(keys)
	for _, k := range slices.Compact(keys) {
		put(k + "=" + values[k])
	}
	return b.String(), true
}
