package rls

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/shardlimiter/shardlimiter/limit"
	"github.com/shardlimiter/shardlimiter/transport"
	"github.com/shardlimiter/shardlimiter/transport/server"
)

// TestJSONHandler: POST /json answers 200 when OK, 429 when OVER_LIMIT,
// 429 with Retry-After when the node sheds the call, 400 for bad JSON.
func TestJSONHandler(t *testing.T) {
	t.Parallel()
	const body = `{"domain":"d","descriptors":[{"entries":[{"key":"k","value":"a"}]}]}`
	over := &fakeChecker{answers: map[string]limit.Result{"per_min": refusedAt(0, time.Second)}}
	full := server.NewInFlight(1)
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
		{"shed", body, server.BoundChecker(&fakeChecker{}, full, nil, server.ListenerHTTP), http.StatusTooManyRequests, "1", `"retry_after_ms":100`},
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

// TestJSONHandlerBodyBounds: a body over 1 MiB is 413, whether its length
// is declared or not; a body that does not fit the node's body-bytes bound
// is 429 with Retry-After and the connection closed. Neither reaches the
// checker, and the bound is whole again afterwards.
func TestJSONHandlerBodyBounds(t *testing.T) {
	t.Parallel()
	const body = `{"domain":"d","descriptors":[{"entries":[{"key":"k","value":"a"}]}]}`
	huge := `{"domain":"d","descriptors":[],"x":"` + strings.Repeat("a", maxJSONBody) + `"}`
	const bound = 4 * maxJSONBody // room for a body over the limit to be read up to it
	for _, tc := range []struct {
		name       string
		body       string
		length     int64 // Content-Length; -1: unknown (chunked)
		taken      int64 // of the bound, held by other requests
		code       int
		retryAfter string
		connection string
	}{
		{"fits", body, int64(len(body)), 0, http.StatusOK, "", ""},
		{"over 1 MiB", huge, int64(len(huge)), 0, http.StatusRequestEntityTooLarge, "", ""},
		{"over 1 MiB, chunked", huge, -1, 0, http.StatusRequestEntityTooLarge, "", ""},
		{"bound full", body, int64(len(body)), bound, http.StatusTooManyRequests, "1", "close"},
		{"bound full, chunked", body, -1, bound, http.StatusTooManyRequests, "1", "close"},
	} {
		budget := server.NewInFlight(bound)
		if tc.taken > 0 && !budget.TryAcquire(tc.taken) {
			t.Fatalf("%s: TryAcquire(%d) on an idle bound failed", tc.name, tc.taken)
		}
		checker := &fakeChecker{}
		s := newTestService(t, checker, false)
		s.cfg.BodyBytes, s.cfg.Telemetry = budget, server.NewMetrics(nil)
		req := httptest.NewRequest(http.MethodPost, "/json", strings.NewReader(tc.body))
		req.ContentLength = tc.length
		w := httptest.NewRecorder()
		s.JSONHandler().ServeHTTP(w, req)
		if w.Code != tc.code || w.Header().Get("Retry-After") != tc.retryAfter || w.Header().Get("Connection") != tc.connection {
			t.Errorf("%s: POST /json = %d (Retry-After %q, Connection %q) %.200s, want %d (%q, %q)", tc.name,
				w.Code, w.Header().Get("Retry-After"), w.Header().Get("Connection"), w.Body, tc.code, tc.retryAfter, tc.connection)
		}
		if calls := len(checker.calls); (calls > 0) != (tc.code == http.StatusOK) {
			t.Errorf("%s: the checker got %d calls, want some only when answered 200", tc.name, calls)
		}
		if got := budget.InUse(); got != tc.taken {
			t.Errorf("%s: InUse() = %d after the call, want %d (the other requests' only)", tc.name, got, tc.taken)
		}
	}
}
