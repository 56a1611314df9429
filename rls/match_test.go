package rls

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/shardlimiter/shardlimiter/rules"
)

func TestMatchHandler(t *testing.T) {
	t.Parallel()
	set, err := rules.Parse("match.yaml", []byte(`
domain: shop
descriptors:
  - key: tenant
    rate_limit: {name: per_tenant, unit: minute, requests_per_unit: 60}
    descriptors:
      - key: path
        value: /checkout
        shadow_mode: true
        rate_limit: {unit: second, requests_per_unit: 5}
  - key: internal
    rate_limit: {unlimited: true}
`))
	if err != nil {
		t.Fatal(err)
	}
	h := MatchHandler(rules.NewStore(set))
	post := func(body string) (*httptest.ResponseRecorder, map[string]any) {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/v1/config/match", strings.NewReader(body)))
		var out map[string]any
		if err := json.Unmarshal(w.Body.Bytes(), &out); err != nil {
			t.Fatalf("answer %q is not JSON: %v", w.Body, err)
		}
		return w, out
	}
	w, out := post(`{"domain":"shop","descriptors":[
		{"entries":[{"key":"tenant","value":"acme"}]},
		{"entries":[{"key":"tenant","value":"acme"},{"key":"path","value":"/checkout"}]},
		{"entries":[{"key":"internal","value":"x"}]},
		{"entries":[{"key":"nothing","value":"x"}]}]}`)
	if w.Code != http.StatusOK {
		t.Fatalf("status %d: %s", w.Code, w.Body)
	}
	res := out["results"].([]any)
	first := res[0].(map[string]any)
	m, _ := set.Match("shop", []rules.Entry{{Key: "tenant", Value: "acme"}})
	if first["matched"] != true || first["key"] != m.Key {
		t.Errorf("tenant=acme: %v, want matched with key %q", first, m.Key)
	}
	lim := first["limits"].([]any)[0].(map[string]any)
	if lim["name"] != "per_tenant" || lim["requests_per_unit"] != 60.0 || lim["duration_ms"] != 60000.0 || lim["unit"] != "minute" {
		t.Errorf("tenant=acme limit = %v", lim)
	}
	if second := res[1].(map[string]any); second["shadow_mode"] != true || second["matched"] != true {
		t.Errorf("tenant/path: %v, want a shadow-mode match", second)
	}
	if third := res[2].(map[string]any); third["unlimited"] != true {
		t.Errorf("internal: %v, want unlimited", third)
	}
	if fourth := res[3].(map[string]any); fourth["matched"] != false {
		t.Errorf("unknown key: %v, want no match", fourth)
	}

	for body, want := range map[string]int{
		`{"domain":"shop"}`:                    http.StatusBadRequest,
		`{"descriptors":[{"entries":[]}]}`:     http.StatusBadRequest,
		`{"domain":"shop","descriptors":[{}]}`: http.StatusBadRequest,
		`{"domain":"shop","bogus":1}`:          http.StatusBadRequest,
		`not json`:                             http.StatusBadRequest,
	} {
		if w, out := post(body); w.Code != want || out["error"] == nil {
			t.Errorf("POST %s = %d %v, want %d with an error", body, w.Code, out, want)
		}
	}
	w = httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/v1/config/match", nil))
	if w.Code != http.StatusMethodNotAllowed {
		t.Errorf("GET = %d, want 405", w.Code)
	}
}
