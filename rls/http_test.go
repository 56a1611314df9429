package rls

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/shardlimiter/shardlimiter/limit"
	"github.com/shardlimiter/shardlimiter/transport"
)

// TestJSONHandler: POST /json answers 200 when OK, 429 when OVER_LIMIT,
// 429 with Retry-After when the node sheds the call, 400 for bad JSON.
func TestJSONHandler(t *testing.T) {
	t.Parallel()
	const body = `{"domain":"d","descriptors":[{"entries":[{"key":"k","value":"a"}]}]}`
	over := &fakeChecker{answers: map[string]limit.Result{"per_min": refusedAt(0, time.Second)}}
	full := transport.NewInFlight(1)
	full.TryAcquire(1) // another call holds the whole bound
	for _, tc := range []struct {
		name, body string
		checker    transport.Checker
		code       int
		retryAfter string
		contains   string
	}{
		{"ok", body, &fakeChecker{}, http.StatusOK, "", `"overallCode":"OK"`},
		{"over", body, over, http.StatusTooManyRequests, "", `"overallCode":"OVER_LIMIT"`},
		{"shed", body, transport.BoundChecker(&fakeChecker{}, full, nil, transport.ListenerHTTP), http.StatusTooManyRequests, "1", `"retry_after_ms":100`},
		{"bad json", `{"domain":`, &fakeChecker{}, http.StatusBadRequest, "", `"error"`},
		{"no domain", `{"descriptors":[{"entries":[{"key":"k","value":"a"}]}]}`, &fakeChecker{}, http.StatusBadRequest, "", "domain"},
	} {
		s := newTestService(t, &fakeChecker{}, false)
		s.cfg.JSONChecker = tc.checker
		w := httptest.NewRecorder()
		s.JSONHandler().ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/json", strings.NewReader(tc.body)))
		if w.Code != tc.code || w.Header().Get("Retry-After") != tc.retryAfter || !strings.Contains(w.Body.String(), tc.contains) {
			t.Errorf("%s: POST /json = %d (Retry-After %q) %s, want %d (%q) with %s",
				tc.name, w.Code, w.Header().Get("Retry-After"), w.Body, tc.code, tc.retryAfter, tc.contains)
		}
	}
}
