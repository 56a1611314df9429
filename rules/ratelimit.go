package rules

import (
	"strings"
	"time"

	"github.com/shardlimiter/shardlimiter/limit"
	"go.yaml.in/yaml/v3"
)

// Limit is one limit of a matched rule.
type Limit struct {
	// Name is the rate limit's name: its name field, or when absent one
	// generated from the descriptor path, e.g. "messaging.message_type_marketing.to_number"
	// (with "#0", "#1"… appended for the entries of rate_limits). Generated
	// names are stable: they change only when the path does.
	Name string
	// Named reports whether Name was written in the file; false when it
	// was generated. envoyproxy/ratelimit reports only written names
	// (current_limit.name).
	Named bool
	// Rule is the limit to apply. Rule.Limit is 0 for requests_per_unit: 0,
	// which rejects every hit (envoyproxy/ratelimit's way to block a value);
	// such a Rule does not pass limit.Rule.Validate and is never sent to a
	// table: see Blocks.
	Rule limit.Rule
	// Unit is the unit as written, in lower case: "second" … "year".
	Unit string
}

// Blocks reports whether the limit rejects every hit (requests_per_unit: 0).
func (l Limit) Blocks() bool { return l.Rule.Limit == 0 }

// unit is one value of a rate limit's unit field.
type unit struct {
	period   time.Duration // the span of the window; for a calendar unit without FIXED_WINDOW, envoyproxy/ratelimit's fixed length
	calendar limit.Calendar
}

const day = 24 * time.Hour

// units are the units envoyproxy/ratelimit knows. week, month and year are
// calendar periods under FIXED_WINDOW, and the fixed 7, 30 and 365 days
// of envoyproxy/ratelimit under the other algorithms.
var units = map[string]unit{
	"second": {time.Second, limit.NoCalendar},
	"minute": {time.Minute, limit.NoCalendar},
	"hour":   {time.Hour, limit.NoCalendar},
	"day":    {day, limit.NoCalendar},
	"week":   {7 * day, limit.CalendarWeek},
	"month":  {30 * day, limit.CalendarMonth},
	"year":   {365 * day, limit.CalendarYear},
}

var (
	rateLimitFields = []string{"unit", "requests_per_unit", "unlimited", "name", "replaces", "algorithm", "burst", "lease"}
	replacesFields  = []string{"name"}
)

// rateLimit reads one rate_limit block (or one entry of rate_limits).
// generated is the name it gets when it has none. It returns the limit,
// whether its name was written, whether it is unlimited, and the names it
// replaces.
func (p *parser) rateLimit(n *yaml.Node, generated string) (l Limit, named, unlimited bool, replaces []string, err error) {
	f, err := p.mapping(n, "a rate limit", rateLimitFields)
	if err != nil {
		return l, false, false, nil, err
	}
	if l.Name, err = p.str(f["name"].val, "name"); err != nil {
		return l, false, false, nil, err
	}
	if named = l.Name != ""; !named {
		l.Name = generated
	}
	l.Named = named
	if replaces, err = p.replaces(f["replaces"].val); err != nil {
		return l, false, false, nil, err
	}
	if unlimited, err = p.boolean(f["unlimited"].val, "unlimited"); err != nil {
		return l, false, false, nil, err
	}
	if unlimited {
		// requests_per_unit is ignored, as envoyproxy/ratelimit does.
		for _, k := range []string{"unit", "algorithm", "burst", "lease"} {
			if fk := f[k].key; fk != nil {
				return l, false, false, nil, p.errf(fk, "%s must not be set when unlimited is true", k)
			}
		}
		return l, named, true, replaces, nil
	}
	if l.Rule, l.Unit, err = p.limitRule(resolve(n), f); err != nil {
		return l, false, false, nil, err
	}
	return l, named, false, replaces, nil
}

// limitRule reads the unit, requests_per_unit, algorithm and burst of a
// rate limit's fields f (n is the rate limit) into a validated rule.
func (p *parser) limitRule(n *yaml.Node, f map[string]field) (limit.Rule, string, error) {
	var r limit.Rule
	text, err := p.str(f["unit"].val, "unit")
	if err != nil {
		return r, "", err
	}
	name := strings.ToLower(text)
	u, ok := units[name]
	switch {
	case f["unit"].key == nil || text == "":
		return r, "", p.errf(n, "rate limit has no unit (second, minute, hour, day, week, month or year)")
	case !ok:
		return r, "", p.errf(f["unit"].val, "unknown unit %q", text)
	case f["requests_per_unit"].key == nil:
		return r, "", p.errf(n, "rate limit has no requests_per_unit")
	}
	if r.Limit, err = p.integer(f["requests_per_unit"].val, "requests_per_unit", limit.MaxLimit); err != nil {
		return r, "", err
	}
	if r.Algorithm, err = p.algorithm(f["algorithm"].val); err != nil {
		return r, "", err
	}
	if r.Burst, err = p.integer(f["burst"].val, "burst", limit.MaxLimit); err != nil {
		return r, "", err
	}
	if r.NoLease, err = p.noLease(f["lease"], r.Algorithm); err != nil {
		return r, "", err
	}
	r.Period = u.period
	if u.calendar != limit.NoCalendar && r.Algorithm == limit.FixedWindow {
		r.Calendar, r.Period = u.calendar, u.calendar.Period()
	}
	check := r
	check.Limit = max(r.Limit, 1) // requests_per_unit: 0 blocks; the rest must still be valid
	if err := check.Validate(); err != nil {
		at := n
		if f["burst"].key != nil && strings.Contains(err.Error(), "burst") {
			at = f["burst"].key
		} else if f["algorithm"].key != nil {
			at = f["algorithm"].key
		}
		return r, "", p.errf(at, "%v", err)
	}
	return r, name, nil
}

// noLease reads a rate limit's lease field: true (the default) lets the
// nodes decide its checks from leases when --leases is on, false keeps
// them with the key's owner. Only TOKEN_BUCKET, FIXED_WINDOW and
// SLIDING_WINDOW are ever leased: lease: true on another algorithm is an
// error, as it would promise what the nodes never do.
func (p *parser) noLease(f field, a limit.Algorithm) (bool, error) {
	if f.key == nil {
		return false, nil
	}
	lease, err := p.boolean(f.val, "lease")
	if err != nil {
		return false, err
	}
	if lease && a != limit.TokenBucket && a != limit.FixedWindow && a != limit.SlidingWindow {
		return false, p.errf(f.key, "lease: true applies to TOKEN_BUCKET, FIXED_WINDOW and SLIDING_WINDOW; %v is always decided by its key's owner", a)
	}
	return !lease, nil
}

// algorithm reads an algorithm name (any case); null is FIXED_WINDOW.
func (p *parser) algorithm(n *yaml.Node) (limit.Algorithm, error) {
	text, err := p.str(n, "algorithm")
	if err != nil || text == "" {
		return limit.FixedWindow, err
	}
	for _, a := range limit.Algorithms() {
		if strings.EqualFold(text, a.String()) {
			return a, nil
		}
	}
	return 0, p.errf(resolve(n), "unknown algorithm %q (TOKEN_BUCKET, LEAKY_BUCKET, FIXED_WINDOW, SLIDING_WINDOW or SLIDING_LOG)", text)
}

// replaces reads a replaces list: mappings with a non-empty name.
func (p *parser) replaces(n *yaml.Node) ([]string, error) {
	items, err := p.sequence(n, "replaces")
	if err != nil {
		return nil, err
	}
	var names []string
	for _, item := range items {
		f, err := p.mapping(item, "a replaces entry", replacesFields)
		if err != nil {
			return nil, err
		}
		name, err := p.str(f["name"].val, "name")
		if err != nil {
			return nil, err
		}
		if name == "" {
			return nil, p.errf(resolve(item), "replaces entry has an empty name")
		}
		names = append(names, name)
	}
	return names, nil
}
