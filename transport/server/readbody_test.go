package server

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/shardlimiter/shardlimiter/transport"

	"github.com/prometheus/client_golang/prometheus"
)

// serveReadBody answers req as a handler built on ReadBody answers it (as
// package rls's POST /json does): 200 with the body echoed, 413 over Max,
// 429 for the budget, 400 otherwise. held is the budget in use while the
// handler still holds the body, before release.
func serveReadBody(req *http.Request, lim BodyLimit) (w *httptest.ResponseRecorder, held int64) {
	w = httptest.NewRecorder()
	body, release, err := ReadBody(w, req, lim)
	held = lim.Budget.InUse()
	release()
	var mbe *http.MaxBytesError
	switch {
	case errors.As(err, &mbe):
		WriteError(w, http.StatusRequestEntityTooLarge, err.Error())
	case errors.Is(err, transport.ErrOverloaded):
		WriteHTTPError(w, err)
	case err != nil:
		WriteError(w, http.StatusBadRequest, err.Error())
	default:
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write(body)
	}
	return w, held
}

// TestReadBody: a body is read whole and its bytes are held in the budget
// until release; over Max is a *http.MaxBytesError whether its length is
// declared or not; a body that does not fit the budget is refused
// (transport.ErrOverloaded: 429 with Retry-After, Connection: close, one shed of the
// HTTP listener for body_bytes); any other read error is neither.
func TestReadBody(t *testing.T) {
	t.Parallel()
	const maxBody = 1000
	fits := strings.Repeat("a", 100)
	for _, tc := range []struct {
		name    string
		body    io.Reader
		length  int64 // Content-Length; -1: unknown (chunked)
		taken   int64 // budget held by other requests
		code    int
		held    int64 // budget in use before release
		closing bool  // Connection: close
		sheds   float64
	}{
		{"fits", strings.NewReader(fits), 100, 0, http.StatusOK, 100, false, 0},
		{"fits, chunked", strings.NewReader(fits), -1, 0, http.StatusOK, 100, false, 0},
		{"fits beside others", strings.NewReader(fits), 100, 900, http.StatusOK, 1000, false, 0},
		{"over Max, declared", strings.NewReader(strings.Repeat("a", maxBody+1)), maxBody + 1, 0, http.StatusRequestEntityTooLarge, 0, false, 0},
		{"over Max, chunked", strings.NewReader(strings.Repeat("a", maxBody+1)), -1, 0, http.StatusRequestEntityTooLarge, 0, false, 0},
		{"budget full", strings.NewReader(fits), 100, 1000, http.StatusTooManyRequests, 1000, true, 1},
		{"budget full while reading", strings.NewReader(fits), -1, 950, http.StatusTooManyRequests, 950, true, 1},
		{"read error", iotest.ErrReader(errors.New("connection reset")), -1, 0, http.StatusBadRequest, 0, false, 0},
	} {
		reg := prometheus.NewRegistry()
		budget := NewInFlight(maxBody)
		if tc.taken > 0 && !budget.TryAcquire(tc.taken) {
			t.Fatalf("%s: TryAcquire(%d) on an idle budget failed", tc.name, tc.taken)
		}
		req := httptest.NewRequest(http.MethodPost, "/json", tc.body)
		req.ContentLength = tc.length
		w, held := serveReadBody(req, BodyLimit{Budget: budget, Max: maxBody, Metrics: NewMetrics(reg)})
		retry := ""
		if tc.code == http.StatusTooManyRequests {
			retry = "1"
		}
		if w.Code != tc.code || held != tc.held || w.Header().Get("Retry-After") != retry ||
			(w.Header().Get("Connection") == "close") != tc.closing {
			t.Errorf("%s: ReadBody answered %d (held %d, Retry-After %q, Connection %q) %s; want %d (held %d, Retry-After %q, close %v)",
				tc.name, w.Code, held, w.Header().Get("Retry-After"), w.Header().Get("Connection"), w.Body,
				tc.code, tc.held, retry, tc.closing)
		}
		if tc.code == http.StatusOK && w.Body.String() != fits {
			t.Errorf("%s: ReadBody read %q, want %q", tc.name, w.Body, fits)
		}
		if got := budget.InUse(); got != tc.taken {
			t.Errorf("%s: InUse() = %d after release, want %d (the other requests' only)", tc.name, got, tc.taken)
		}
		if v, _ := sample(t, reg, "shardlimiter_transport_shed_total", "listener", "http", "resource", "body_bytes"); v != tc.sheds {
			t.Errorf("%s: shed_total{http,body_bytes} = %v, want %v", tc.name, v, tc.sheds)
		}
	}
}

// TestReadBodyUnbounded: a nil budget bounds nothing, and a zero Max means
// DefaultMaxBodyBytes.
func TestReadBodyUnbounded(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		size int
		code int
	}{
		{DefaultMaxBodyBytes, http.StatusOK},
		{DefaultMaxBodyBytes + 1, http.StatusRequestEntityTooLarge},
	} {
		req := httptest.NewRequest(http.MethodPost, "/json", strings.NewReader(strings.Repeat("a", tc.size)))
		if w, _ := serveReadBody(req, BodyLimit{}); w.Code != tc.code {
			t.Errorf("ReadBody of %d bytes with no limit set = %d, want %d", tc.size, w.Code, tc.code)
		}
	}
}
