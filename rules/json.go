package rules

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"slices"
)

// The JSON form of a Set (GET /v1/config). Descriptors are listed in the
// order they are matched: exact values sorted, wildcard values in file
// order, then keys without value, sorted.
type (
	jsonSet struct {
		Version string       `json:"version"`
		Domains []jsonDomain `json:"domains"`
	}
	jsonDomain struct {
		Domain      string           `json:"domain"`
		File        string           `json:"file,omitempty"`
		Descriptors []jsonDescriptor `json:"descriptors"`
		RLQS        *jsonQuota       `json:"rlqs,omitempty"`
	}
	jsonQuota struct {
		Default string            `json:"default"`
		Buckets []jsonQuotaBucket `json:"buckets"`
	}
	jsonQuotaBucket struct {
		Name      string           `json:"name"`
		Entries   []jsonQuotaEntry `json:"entries"`
		RateLimit jsonLimit        `json:"rate_limit"`
	}
	jsonQuotaEntry struct {
		Key   string `json:"key"`
		Value string `json:"value,omitempty"`
	}
	jsonDescriptor struct {
		Key            string           `json:"key"`
		Value          string           `json:"value,omitempty"`
		RateLimits     []jsonLimit      `json:"rate_limits,omitempty"`
		Unlimited      bool             `json:"unlimited,omitempty"`
		ShadowMode     bool             `json:"shadow_mode,omitempty"`
		QuotaMode      bool             `json:"quota_mode,omitempty"`
		ShareThreshold bool             `json:"share_threshold,omitempty"`
		Replaces       []string         `json:"replaces,omitempty"`
		Descriptors    []jsonDescriptor `json:"descriptors,omitempty"`
	}
	jsonLimit struct {
		Name            string `json:"name"`
		Unit            string `json:"unit"`
		RequestsPerUnit int64  `json:"requests_per_unit"`
		Algorithm       string `json:"algorithm"`
		Burst           int64  `json:"burst,omitempty"`
		Calendar        string `json:"calendar,omitempty"`
		PeriodMs        int64  `json:"period_ms"`
		Lease           *bool  `json:"lease,omitempty"` // false when the rule opts out of leases
	}
)

// MarshalJSON returns the rules and their version as JSON: {"version",
// "domains": [{"domain", "file", "descriptors": [...]}]}, domains sorted
// by name.
func (s *Set) MarshalJSON() ([]byte, error) {
	if s == nil {
		return json.Marshal(jsonSet{Domains: []jsonDomain{}})
	}
	return json.Marshal(jsonSet{Version: s.version, Domains: s.jsonDomains(true)})
}

// computeVersion hashes the JSON form without file names.
func (s *Set) computeVersion() string {
	b, err := json.Marshal(s.jsonDomains(false))
	if err != nil {
		panic("rules: the JSON form of a set failed: " + err.Error()) // plain values: cannot happen
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:8])
}

func (s *Set) jsonDomains(withFiles bool) []jsonDomain {
	out := make([]jsonDomain, 0, len(s.loaded))
	for _, d := range s.loaded {
		jd := jsonDomain{Domain: d.name, Descriptors: jsonLevel(&d.top), RLQS: jsonQuotaSection(d.quota)}
		if withFiles {
			jd.File = d.file
		}
		out = append(out, jd)
	}
	slices.SortFunc(out, func(a, b jsonDomain) int { return cmp.Compare(a.Domain, b.Domain) })
	return out
}

// matchOrder returns lv's nodes in the order a lookup tries them.
func matchOrder(lv *level) []*node {
	byEntry := func(a, b *node) int { return cmp.Or(cmp.Compare(a.key, b.key), cmp.Compare(a.value, b.value)) }
	var exact, keyOnly []*node
	for _, n := range lv.exact {
		exact = append(exact, n)
	}
	for _, n := range lv.keyOnly {
		keyOnly = append(keyOnly, n)
	}
	slices.SortFunc(exact, byEntry)
	slices.SortFunc(keyOnly, byEntry)
	return slices.Concat(exact, lv.wild, keyOnly)
}

func jsonLevel(lv *level) []jsonDescriptor {
	nodes := matchOrder(lv)
	if len(nodes) == 0 {
		return nil
	}
	out := make([]jsonDescriptor, 0, len(nodes))
	for _, n := range nodes {
		jd := jsonDescriptor{Key: n.key, Value: n.value, ShareThreshold: n.share, Descriptors: jsonLevel(&n.next)}
		if r := n.rule; r != nil {
			jd.Unlimited, jd.ShadowMode, jd.QuotaMode, jd.Replaces = r.unlimited, r.shadow, r.quota, r.replaces
			for _, l := range r.limits {
				jd.RateLimits = append(jd.RateLimits, jsonLimitOf(l))
			}
		}
		out = append(out, jd)
	}
	return out
}

func jsonQuotaSection(q *quotaSection) *jsonQuota {
	if q == nil {
		return nil
	}
	out := &jsonQuota{Default: q.dflt.String(), Buckets: []jsonQuotaBucket{}}
	for _, r := range q.rules {
		b := jsonQuotaBucket{Name: r.name, RateLimit: jsonLimitOf(r.limit)}
		for _, e := range r.entries {
			b.Entries = append(b.Entries, jsonQuotaEntry{Key: e.key, Value: e.value})
		}
		out.Buckets = append(out.Buckets, b)
	}
	return out
}

func jsonLimitOf(l Limit) jsonLimit {
	jl := jsonLimit{Name: l.Name, Unit: l.Unit, RequestsPerUnit: l.Rule.Limit, Algorithm: l.Rule.Algorithm.String(),
		Burst: l.Rule.Burst, PeriodMs: l.Rule.Period.Milliseconds()}
	if l.Rule.Calendar != 0 {
		jl.Calendar = l.Rule.Calendar.String()
	}
	if l.Rule.NoLease {
		jl.Lease = new(bool)
	}
	return jl
}
