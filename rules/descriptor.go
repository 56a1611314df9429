package rules

import (
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// domain is one domain's rules: the top level of its descriptor tree.
type domain struct {
	name string
	file string // where it was read, for messages and GET /v1/config
	line int
	top  level
	// quota is the domain's rlqs section (quota.go); nil when it has none.
	quota *quotaSection
}

// level is one list of descriptors: the children of a domain or of a
// descriptor. A request entry is looked up exact value first, then the
// wildcard patterns in file order, then key only.
type level struct {
	exact   map[Entry]*node
	keyOnly map[string]*node
	wild    []*node
	list    []*node // every node, in file order
}

// node is one descriptor of the file.
type node struct {
	key, value string
	parts      []string // value split at '*' when it is a wildcard pattern
	share      bool     // share_threshold: every value the pattern matches shares one counter
	rule       *rule    // nil: no rate_limit here (a branch, or an allow-listed value)
	next       level
	line       int
}

// rule is what a descriptor with a rate_limit (or rate_limits) asks for.
type rule struct {
	limits    []Limit
	unlimited bool
	shadow    bool
	quota     bool
	replaces  []string
	metadata  map[string]any // the descriptor's metadata, nil when it has none
	detailed  bool           // detailed_metric: statistics per descriptor value
}

// find returns the node of lv that entry e matches, or nil.
func (lv *level) find(e Entry) *node {
	if n := lv.exact[e]; n != nil {
		return n
	}
	for _, n := range lv.wild {
		if n.key == e.Key && wildcardMatch(n.parts, e.Value) {
			return n
		}
	}
	return lv.keyOnly[e.Key]
}

// wildcardMatch reports whether value matches the pattern split at its
// '*'s: each '*' stands for any run of bytes, possibly empty.
func wildcardMatch(parts []string, value string) bool {
	first, last := parts[0], parts[len(parts)-1]
	if len(value) < len(first)+len(last) || !strings.HasPrefix(value, first) || !strings.HasSuffix(value, last) {
		return false
	}
	mid := value[len(first) : len(value)-len(last)]
	for _, p := range parts[1 : len(parts)-1] {
		i := strings.Index(mid, p)
		if i < 0 {
			return false
		}
		mid = mid[i+len(p):]
	}
	return true
}

var (
	fileFields       = []string{"domain", "descriptors", "rlqs"}
	descriptorFields = []string{
		"key", "value", "rate_limit", "rate_limits", "descriptors", "shadow_mode", "quota_mode",
		"share_threshold", "detailed_metric", "value_to_metric", "metadata",
	}
)

// domain reads one YAML document: a domain and its descriptors.
func (p *parser) domain(n *yaml.Node) (*domain, error) {
	f, err := p.mapping(n, "the file", fileFields)
	if err != nil {
		return nil, err
	}
	name, err := p.str(f["domain"].val, "domain")
	if err != nil {
		return nil, err
	}
	if name == "" {
		return nil, p.errf(resolve(n), "domain is empty or missing")
	}
	top, err := p.level(f["descriptors"].val, name)
	if err != nil {
		return nil, err
	}
	q, err := p.quota(f["rlqs"].val, name)
	if err != nil {
		return nil, err
	}
	return &domain{name: name, file: p.file, line: resolve(n).Line, top: top, quota: q}, nil
}

// level reads a list of descriptors; path names the parent (for the
// generated names of rules).
func (p *parser) level(n *yaml.Node, path string) (level, error) {
	lv := level{exact: map[Entry]*node{}, keyOnly: map[string]*node{}}
	items, err := p.sequence(n, "descriptors")
	if err != nil {
		return lv, err
	}
	seen := map[Entry]*node{}
	for _, item := range items {
		d, err := p.descriptor(item, path)
		if err != nil {
			return lv, err
		}
		id := Entry{d.key, d.value}
		if first := seen[id]; first != nil {
			return lv, p.errf(resolve(item), "duplicate descriptor %s (first on line %d)", entryText(id), first.line)
		}
		seen[id] = d
		switch {
		case d.parts != nil:
			lv.wild = append(lv.wild, d)
		case d.value == "":
			lv.keyOnly[d.key] = d
		default:
			lv.exact[id] = d
		}
		lv.list = append(lv.list, d)
	}
	return lv, nil
}

// descriptor reads one descriptor and everything nested in it.
func (p *parser) descriptor(n *yaml.Node, parent string) (*node, error) {
	f, err := p.mapping(n, "a descriptor", descriptorFields)
	if err != nil {
		return nil, err
	}
	d := &node{line: resolve(n).Line}
	if d.key, err = p.str(f["key"].val, "key"); err != nil {
		return nil, err
	}
	if d.key == "" {
		return nil, p.errf(resolve(n), "descriptor has an empty or missing key")
	}
	if d.value, err = p.str(f["value"].val, "value"); err != nil {
		return nil, err
	}
	path := parent + "." + d.key
	if d.value != "" {
		path += "_" + d.value
	}
	if strings.Contains(d.value, "*") {
		d.parts = strings.Split(d.value, "*")
	}
	flags := map[string]bool{}
	for _, name := range []string{"shadow_mode", "quota_mode", "share_threshold", "detailed_metric", "value_to_metric"} {
		if flags[name], err = p.boolean(f[name].val, name); err != nil {
			return nil, err
		}
	}
	if d.share = flags["share_threshold"]; d.share && d.parts == nil {
		return nil, p.errf(f["share_threshold"].key, "share_threshold applies to wildcard values (with '*') only, not %s", entryText(Entry{d.key, d.value}))
	}
	if d.rule, err = p.rule(f, path); err != nil {
		return nil, err
	}
	md, err := p.metadata(f["metadata"])
	if err != nil {
		return nil, err
	}
	if d.rule != nil {
		d.rule.shadow, d.rule.quota, d.rule.metadata = flags["shadow_mode"], flags["quota_mode"], md
		d.rule.detailed = flags["detailed_metric"]
	}
	if d.next, err = p.level(f["descriptors"].val, path); err != nil {
		return nil, err
	}
	return d, nil
}

// rule reads the rate_limit or rate_limits of a descriptor's fields f;
// nil when it has neither.
func (p *parser) rule(f map[string]field, path string) (*rule, error) {
	one, many := f["rate_limit"], f["rate_limits"]
	var items []*yaml.Node
	switch {
	case one.key != nil && many.key != nil:
		return nil, p.errf(many.key, "rate_limit and rate_limits are both set (line %d); keep one", one.key.Line)
	case one.key != nil:
		items = []*yaml.Node{one.val}
	case many.key != nil:
		var err error
		if items, err = p.sequence(many.val, "rate_limits"); err != nil {
			return nil, err
		}
		if len(items) == 0 {
			return nil, p.errf(many.key, "rate_limits is empty")
		}
	default:
		return nil, nil
	}
	r := &rule{}
	var names []string
	for i, item := range items {
		name := path
		if many.key != nil {
			name += "#" + strconv.Itoa(i)
		}
		l, _, unlimited, replaces, err := p.rateLimit(item, name)
		if err != nil {
			return nil, err
		}
		if unlimited && len(items) > 1 {
			return nil, p.errf(resolve(item), "an unlimited rate limit cannot be combined with other limits")
		}
		r.unlimited = unlimited
		if !unlimited {
			r.limits = append(r.limits, l)
		}
		names = append(names, l.Name)
		r.replaces = append(r.replaces, replaces...)
	}
	for _, rp := range r.replaces {
		if slices.Contains(names, rp) {
			return nil, p.errf(resolve(items[0]), "replaces names the descriptor's own rate limit %q", rp)
		}
	}
	return r, nil
}

// entryText shows a descriptor entry in messages: key "k" or key "k" value "v".
func entryText(e Entry) string {
	if e.Value == "" {
		return "key " + strconv.Quote(e.Key)
	}
	return "key " + strconv.Quote(e.Key) + " value " + strconv.Quote(e.Value)
}
