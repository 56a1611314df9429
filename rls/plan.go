package rls

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	ratelimitpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typepb "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/shardlimiter/shardlimiter/limit"
	"github.com/shardlimiter/shardlimiter/rules"
)

// kind is what a descriptor turned into.
type kind uint8

const (
	noRule    kind = iota // no rule matched, or the domain is unknown: OK
	unlimited             // the rule says unlimited: OK, remaining 2^32-1
	checked               // checks[first:first+n] decide it
	replaced              // every limit of its rule was replaced by another descriptor's rule: OK
	blocked               // a limit of its rule has requests_per_unit 0: OVER_LIMIT unless it counts nothing
)

// desc is one descriptor of a request, planned.
type desc struct {
	kind     kind
	shadow   bool           // the rule's shadow_mode
	quota    bool           // the rule's quota_mode
	hits     int64          // the hits it asked for
	first, n int            // its checks
	limits   []rules.Limit  // the limit of each of its checks; blocked: the blocking one first
	metadata map[string]any // its rule's metadata (rules.Match.Metadata)
	matched  bool           // its limits are the rules file's (not a limit override)
	detailed string         // detailed_metric: its statistics name (rulemetrics.go)
}

// request is a RateLimitRequest planned: what each descriptor became, and
// the checks the node decides, descriptor after descriptor.
type request struct {
	domain  string
	descs   []desc
	checks  []limit.Check
	results []limit.Result
}

// validRequest refuses what envoyproxy/ratelimit refuses.
func validRequest(req *rlspb.RateLimitRequest) error {
	switch {
	case req.GetDomain() == "":
		return status.Error(codes.InvalidArgument, "rls: domain must not be empty")
	case len(req.GetDescriptors()) == 0:
		return status.Error(codes.InvalidArgument, "rls: descriptor list must not be empty")
	case len(req.GetDescriptors()) > MaxDescriptors:
		return status.Errorf(codes.InvalidArgument, "rls: %d descriptors in one request, max %d", len(req.GetDescriptors()), MaxDescriptors)
	}
	return nil
}

// MaxDescriptors bounds the descriptors of one request. Each becomes up to
// limit.MaxGroup checks of one batch; without a bound a single message of
// a few MiB could make the node decide tens of thousands of checks at once
// (the in-flight bound admits any one call on an idle node). Envoy sends a
// handful per request.
const MaxDescriptors = 64

// plan matches every descriptor of req against set (nil matches nothing)
// and builds the checks, each counting as envoyproxy/ratelimit counts
// (limit.Overdraft). Replaces apply across the request, as in
// envoyproxy/ratelimit: a limit whose name another matched rule replaces
// is not checked.
func plan(set *rules.Set, req *rlspb.RateLimitRequest) *request {
	p := &request{domain: req.Domain, descs: make([]desc, len(req.Descriptors))}
	keys := make([]string, len(req.Descriptors))
	var ents []rules.Entry
	var repl []string
	for i, d := range req.Descriptors {
		if o := d.GetLimit(); o != nil && o.GetRequestsPerUnit() > 0 {
			p.descs[i] = desc{kind: checked, limits: []rules.Limit{overrideLimit(o)}}
			keys[i] = overrideKey(req.Domain, d)
			continue
		}
		if set == nil {
			continue
		}
		ents = ents[:0]
		for _, e := range d.GetEntries() {
			ents = append(ents, rules.Entry{Key: e.GetKey(), Value: e.GetValue()})
		}
		m, ok := set.Match(req.Domain, ents)
		if !ok {
			continue
		}
		repl = append(repl, m.Replaces...)
		switch {
		case m.Unlimited:
			p.descs[i].kind = unlimited
		case len(m.Limits) > 0:
			p.descs[i] = desc{kind: checked, shadow: m.Shadow, quota: m.Quota, limits: m.Limits, metadata: m.Metadata, matched: true}
			if m.Detailed {
				p.descs[i].detailed = detailedName(req.Domain, ents)
			}
			keys[i] = m.Key
		}
	}
	if len(repl) > 0 {
		dropReplaced(p.descs, req.Descriptors, repl)
	}
	for i, d := range req.Descriptors {
		pd := &p.descs[i]
		if pd.kind != checked {
			continue
		}
		hits := hitsOf(req, d)
		if b := blocking(pd.limits); b >= 0 {
			pd.kind, pd.hits, pd.limits = blocked, hits, pd.limits[b:b+1]
			continue
		}
		pd.hits, pd.first, pd.n = hits, len(p.checks), len(pd.limits)
		for j, l := range pd.limits {
			r := l.Rule
			r.Behavior |= limit.Overdraft
			p.checks = append(p.checks, limit.Check{
				Name: l.Name, Key: keys[i], Hits: hits, Rule: r,
				Chained: j < len(pd.limits)-1,
			})
		}
	}
	return p
}

// dropReplaced removes the limits whose name is in repl from the matched
// (not overridden) descriptors; a descriptor left with none is replaced.
func dropReplaced(descs []desc, in []*ratelimitpb.RateLimitDescriptor, repl []string) {
	isRepl := func(name string) bool {
		for _, r := range repl {
			if r == name && name != "" {
				return true
			}
		}
		return false
	}
	for i := range descs {
		d := &descs[i]
		if d.kind != checked || in[i].GetLimit().GetRequestsPerUnit() > 0 {
			continue
		}
		var kept []rules.Limit
		for j, l := range d.limits {
			if isRepl(l.Name) {
				if kept == nil {
					kept = append(make([]rules.Limit, 0, len(d.limits)), d.limits[:j]...)
				}
				continue
			}
			if kept != nil {
				kept = append(kept, l)
			}
		}
		switch {
		case kept == nil: // nothing replaced
		case len(kept) == 0:
			d.kind, d.limits = replaced, nil
		default:
			d.limits = kept
		}
	}
}

// blocking is the index of the first limit that blocks every hit
// (requests_per_unit: 0), or -1.
func blocking(ls []rules.Limit) int {
	for i := range ls {
		if ls[i].Blocks() {
			return i
		}
	}
	return -1
}

// hitsOf is the descriptor's hits: its own hits_addend when set (0 checks
// without counting), else the request's, where 0 means 1. A negative
// addend (is_negative_hits, a refund) is not supported: it counts nothing.
func hitsOf(req *rlspb.RateLimitRequest, d *ratelimitpb.RateLimitDescriptor) int64 {
	if d.GetIsNegativeHits() {
		return 0
	}
	if h := d.GetHitsAddend(); h != nil {
		return int64(min(h.GetValue(), uint64(limit.MaxHits)+1))
	}
	return int64(max(1, req.GetHitsAddend()))
}

// unitPeriods are the fixed lengths of the override units; month and year
// are those of envoyproxy/ratelimit, used with a unit_multiplier.
var unitPeriods = map[typepb.RateLimitUnit]time.Duration{
	typepb.RateLimitUnit_SECOND: time.Second,
	typepb.RateLimitUnit_MINUTE: time.Minute,
	typepb.RateLimitUnit_HOUR:   time.Hour,
	typepb.RateLimitUnit_DAY:    24 * time.Hour,
	typepb.RateLimitUnit_MONTH:  30 * 24 * time.Hour,
	typepb.RateLimitUnit_YEAR:   365 * 24 * time.Hour,
}

// unitCalendars are the calendar periods of a month and a year, as the
// rules file has them: the window starts on the 1st, or on January 1st.
var unitCalendars = map[typepb.RateLimitUnit]limit.Calendar{
	typepb.RateLimitUnit_MONTH: limit.CalendarMonth,
	typepb.RateLimitUnit_YEAR:  limit.CalendarYear,
}

// overrideLimit is the fixed-window limit a descriptor's limit override
// asks for. An unknown unit gives an invalid rule (period 0): the call
// fails with InvalidArgument.
func overrideLimit(o *ratelimitpb.RateLimitDescriptor_RateLimitOverride) rules.Limit {
	mult := uint32(1)
	if m := o.GetUnitMultiplier(); m != nil && m.GetValue() > 0 {
		mult = m.GetValue()
	}
	unit := strings.ToLower(o.GetUnit().String())
	name := "override_" + unit
	if mult > 1 {
		name += "_" + strconv.FormatUint(uint64(mult), 10)
	}
	r := limit.Rule{
		Algorithm: limit.FixedWindow,
		Limit:     int64(o.GetRequestsPerUnit()),
		Period:    unitPeriods[o.GetUnit()] * time.Duration(mult),
	}
	if c, ok := unitCalendars[o.GetUnit()]; ok && mult == 1 {
		r.Calendar, r.Period = c, c.Period()
	}
	return rules.Limit{Name: name, Unit: unit, Rule: r} // not Named: current_limit.name stays empty
}

// overrideKey is the unique key of an overridden descriptor: its domain
// and every entry, as envoyproxy/ratelimit keys it.
func overrideKey(domain string, d *ratelimitpb.RateLimitDescriptor) string {
	var b strings.Builder
	b.WriteString(domain)
	for _, e := range d.GetEntries() {
		fmt.Fprintf(&b, "\x1f%s=%s", e.GetKey(), e.GetValue())
	}
	return b.String()
}
