package rls

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/shardlimiter/shardlimiter/rules"
)

// POST /v1/config/match: which rule a request's descriptors match, without
// counting anything. The answer names, per descriptor, the matched rule's
// limits and the counter each uses: the check name and unique key a
// ShouldRateLimit call decides it under, which GET /v1/keys?name=…&key=…
// (with the limit's rule) then reads on the key's owner.

// maxMatchBody bounds the body of POST /v1/config/match.
const maxMatchBody = 1 << 20

// MatchRequest is the body of POST /v1/config/match.
type MatchRequest struct {
	Domain      string            `json:"domain"`
	Descriptors []MatchDescriptor `json:"descriptors"`
}

// MatchDescriptor is one descriptor of a MatchRequest: its entries, in order.
type MatchDescriptor struct {
	Entries []rules.Entry `json:"entries"`
}

// MatchResult answers one descriptor.
type MatchResult struct {
	// Matched: a rule matched; false means ShouldRateLimit answers it OK
	// without counting (no rule, or an unknown domain).
	Matched bool `json:"matched"`
	// Key is the counter's unique key: the ring routes on it, and every
	// request that shares the counter has the same.
	Key       string       `json:"key,omitempty"`
	Unlimited bool         `json:"unlimited"`
	Shadow    bool         `json:"shadow_mode"`
	Quota     bool         `json:"quota_mode"`
	Replaces  []string     `json:"replaces,omitempty"`
	Limits    []MatchLimit `json:"limits"`
}

// MatchLimit is one limit of a matched rule: the check a ShouldRateLimit
// call makes for it (name and the result's Key) and its rule.
type MatchLimit struct {
	Name            string `json:"name"`
	RequestsPerUnit int64  `json:"requests_per_unit"`
	Unit            string `json:"unit"`
	Algorithm       string `json:"algorithm"`
	DurationMs      int64  `json:"duration_ms"`
	Burst           int64  `json:"burst,omitempty"`
}

// MatchHandler serves POST /v1/config/match on the rules in store: body
// {"domain": …, "descriptors": [{"entries": [{"key": …, "value": …}]}]},
// answer {"domain": …, "results": [MatchResult, …]} in the descriptors'
// order. Bad JSON or too many descriptors is a 400 with a JSON error.
func MatchHandler(store *rules.Store) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", "POST")
			writeError(w, http.StatusMethodNotAllowed, "use POST")
			return
		}
		var req MatchRequest
		dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxMatchBody))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&req); err != nil {
			status := http.StatusBadRequest
			if errors.As(err, new(*http.MaxBytesError)) {
				status = http.StatusRequestEntityTooLarge
			}
			writeError(w, status, "rls: bad match request: "+err.Error())
			return
		}
		if _, err := dec.Token(); err != io.EOF {
			writeError(w, http.StatusBadRequest, "rls: bad match request: data after the JSON object")
			return
		}
		if err := validMatch(req); err != nil {
			writeError(w, http.StatusBadRequest, err.Error())
			return
		}
		var set *rules.Set
		if store != nil {
			set = store.Load()
		}
		out := struct {
			Domain  string        `json:"domain"`
			Results []MatchResult `json:"results"`
		}{Domain: req.Domain, Results: make([]MatchResult, len(req.Descriptors))}
		for i, d := range req.Descriptors {
			out.Results[i] = matchOne(set, req.Domain, d.Entries)
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(out)
	})
}

func validMatch(req MatchRequest) error {
	switch {
	case req.Domain == "":
		return errors.New("rls: domain is empty")
	case len(req.Descriptors) == 0:
		return errors.New("rls: no descriptors")
	case len(req.Descriptors) > MaxDescriptors:
		return fmt.Errorf("rls: %d descriptors, max %d", len(req.Descriptors), MaxDescriptors)
	}
	for i, d := range req.Descriptors {
		if len(d.Entries) == 0 {
			return fmt.Errorf("rls: descriptor %d has no entries", i)
		}
	}
	return nil
}

func matchOne(set *rules.Set, domain string, entries []rules.Entry) MatchResult {
	m, ok := set.Match(domain, entries)
	if !ok {
		return MatchResult{Limits: []MatchLimit{}}
	}
	res := MatchResult{Matched: true, Key: m.Key, Unlimited: m.Unlimited, Shadow: m.Shadow, Quota: m.Quota,
		Replaces: m.Replaces, Limits: make([]MatchLimit, len(m.Limits))}
	if m.Unlimited {
		res.Key = ""
	}
	for j, l := range m.Limits {
		res.Limits[j] = MatchLimit{
			Name: l.Name, RequestsPerUnit: l.Rule.Limit, Unit: l.Unit, Algorithm: l.Rule.Algorithm.String(),
			DurationMs: l.Rule.Period.Milliseconds(), Burst: l.Rule.Burst,
		}
	}
	return res
}
