package rules

import (
	"slices"
	"strconv"
	"strings"

	"github.com/shardlimiter/shardlimiter/limit"
)

// Entry is one descriptor entry of a request.
type Entry struct{ Key, Value string }

// Set is an immutable, validated rule set: the domains of one or more
// files. A Set is safe for concurrent use; a nil *Set has no rules.
type Set struct {
	domains map[string]*domain
	loaded  []*domain // in the order they were read
	byName  map[string]limit.Rule
	version string
}

// Match is the rule a request's descriptor matched.
type Match struct {
	// Key identifies the descriptor's counter: the domain and every entry
	// of the descriptor, key and value (each value its own counter, as in
	// envoyproxy/ratelimit), except that an entry matched by a wildcard with
	// share_threshold contributes the pattern, so all its values share one
	// counter. Each string is length-prefixed, so Key is unambiguous:
	// `11:test-domain4:key1=6:value1`. Every request that shares the counter
	// gets the same Key; the ring routes on it.
	//
	// With several Limits, all are counted under this one Key (one owner
	// decides them all); a caller that keeps them in one table keeps them
	// apart, e.g. by the limit's index.
	Key string
	// Limits are the limits to apply, at least one unless Unlimited. They
	// belong to the Set: do not modify them.
	Limits []Limit
	// Unlimited: the descriptor is known and never limited (answer OK).
	Unlimited bool
	// Shadow is the rule's shadow_mode: count, report, but answer OK.
	Shadow bool
	// Quota is the rule's quota_mode (envoyproxy/ratelimit): an over-limit
	// answer of such a descriptor fails the request only when every quota
	// descriptor of the request is over the limit.
	Quota bool
	// Replaces lists the names of the limits this rule replaces: a request
	// that matches both drops the replaced limits. Belongs to the Set.
	Replaces []string
	// Metadata is the descriptor's metadata as written in the file
	// (string keys; values strings, numbers, booleans, nulls, lists and
	// mappings), nil when it has none. envoyproxy/ratelimit returns the
	// metadata of the descriptors that passed in its dynamic metadata.
	// Belongs to the Set: do not modify it.
	Metadata map[string]any
}

// Parse reads one file's YAML (name is used in error messages) into a Set.
// A file may hold several YAML documents, one domain each.
func Parse(name string, data []byte) (*Set, error) {
	ds, err := parseFile(name, data)
	if err != nil {
		return nil, err
	}
	return newSet(ds)
}

// parseFile reads the domains of one file.
func parseFile(name string, data []byte) ([]*domain, error) {
	p := &parser{file: name}
	docs, err := p.documents(data)
	if err != nil {
		return nil, err
	}
	if len(docs) == 0 {
		return nil, &ConfigError{File: name, Msg: "the file is empty: it needs a domain"}
	}
	ds := make([]*domain, 0, len(docs))
	for _, doc := range docs {
		d, err := p.domain(doc)
		if err != nil {
			return nil, err
		}
		ds = append(ds, d)
	}
	return ds, nil
}

// newSet checks that every domain is defined once and indexes the rules.
func newSet(ds []*domain) (*Set, error) {
	s := &Set{domains: make(map[string]*domain, len(ds)), loaded: ds, byName: map[string]limit.Rule{}}
	for _, d := range ds {
		if first := s.domains[d.name]; first != nil {
			return nil, &ConfigError{File: d.file, Line: d.line,
				Msg: "duplicate domain " + strconv.Quote(d.name) + " (first in " + first.file + ":" + strconv.Itoa(first.line) + ")"}
		}
		s.domains[d.name] = d
	}
	// Names written in the file take precedence over generated ones; the
	// first of several equal names wins.
	for _, explicit := range []bool{true, false} {
		for _, d := range ds {
			s.indexNames(&d.top, explicit)
		}
	}
	s.version = s.computeVersion()
	return s, nil
}

// indexNames adds the limits under lv whose names were written in the
// file (explicit) or generated (!explicit) to byName.
func (s *Set) indexNames(lv *level, explicit bool) {
	for _, n := range lv.list {
		if n.rule != nil {
			for _, l := range n.rule.limits {
				if _, taken := s.byName[l.Name]; !taken && l.Named == explicit {
					s.byName[l.Name] = l.Rule
				}
			}
		}
		s.indexNames(&n.next, explicit)
	}
}

// Version returns a hash (hex) of the rules: equal for two sets with the
// same rules, whatever the files' layout, comments, order of exact and
// key-only descriptors or file names; different when any rule differs.
func (s *Set) Version() string {
	if s == nil {
		return ""
	}
	return s.version
}

// Match returns the rule that a descriptor (its entries, in order) of a
// request for domain matches, as envoyproxy/ratelimit does: each entry
// is looked up in the list of descriptors at its depth, exact value
// first, then wildcard values in file order, then key only; a descriptor
// matches only the rule at the depth of its last entry. false means no
// rule: an unknown domain, an entry that matches nothing, a descriptor
// longer or shorter than the rule, or a matched descriptor without
// rate_limit. The caller answers OK and counts it.
func (s *Set) Match(domain string, entries []Entry) (Match, bool) {
	if s == nil || len(entries) == 0 {
		return Match{}, false
	}
	d := s.domains[domain]
	if d == nil {
		return Match{}, false
	}
	var buf [8]*node
	path := buf[:0]
	lv := &d.top
	for _, e := range entries {
		n := lv.find(e)
		if n == nil {
			return Match{}, false
		}
		path = append(path, n)
		lv = &n.next
	}
	r := path[len(path)-1].rule
	if r == nil {
		return Match{}, false
	}
	return Match{
		Key: counterKey(domain, entries, path), Limits: r.limits, Unlimited: r.unlimited,
		Shadow: r.shadow, Quota: r.quota, Replaces: r.replaces, Metadata: r.metadata,
	}, true
}

// counterKey builds Match.Key in one allocation.
func counterKey(domain string, entries []Entry, path []*node) string {
	size := len(domain) + 21
	for _, e := range entries {
		size += len(e.Key) + len(e.Value) + 43
	}
	var b strings.Builder
	b.Grow(size)
	field := func(s string) {
		var num [20]byte
		b.Write(strconv.AppendInt(num[:0], int64(len(s)), 10))
		b.WriteByte(':')
		b.WriteString(s)
	}
	field(domain)
	for i, e := range entries {
		field(e.Key)
		if n := path[i]; n.share {
			b.WriteByte('*')
			field(n.value)
		} else {
			b.WriteByte('=')
			field(e.Value)
		}
	}
	return b.String()
}

// ByName returns the rule of the rate limit called name (its first limit
// of that name: names written in the files first, in the order read, then
// generated names), for the native API's checks that name a configured
// rule. Unlimited rules have no limit and are not found. A blocking rule
// (requests_per_unit: 0) has Limit 0.
func (s *Set) ByName(name string) (limit.Rule, bool) {
	if s == nil {
		return limit.Rule{}, false
	}
	r, ok := s.byName[name]
	return r, ok
}

// Domains returns the names of the set's domains, sorted.
func (s *Set) Domains() []string {
	if s == nil {
		return nil
	}
	names := make([]string, 0, len(s.domains))
	for name := range s.domains {
		names = append(names, name)
	}
	slices.Sort(names)
	return names
}

// Len returns how many descriptors have a rate_limit or rate_limits.
func (s *Set) Len() int {
	if s == nil {
		return 0
	}
	n := 0
	var count func(lv *level)
	count = func(lv *level) {
		for _, d := range lv.list {
			if d.rule != nil {
				n++
			}
			count(&d.next)
		}
	}
	for _, d := range s.loaded {
		count(&d.top)
	}
	return n
}
