package inspect

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/shardlimiter/shardlimiter/limit"
	"github.com/shardlimiter/shardlimiter/transport"
	"github.com/shardlimiter/shardlimiter/transport/server"
)

// fakeInspector answers every inspection with the check it got, for the
// test to look at, and a fixed view: the owner over the limit for good,
// the replica under it with window counts.
type fakeInspector struct{ got chan limit.Check }

func (f fakeInspector) Inspect(_ context.Context, c limit.Check) (limit.Inspection, error) {
	f.got <- c
	if c.Name == "invalid" {
		return limit.Inspection{}, fmt.Errorf("%w: no such rule", transport.ErrInvalidArgument)
	}
	return limit.Inspection{
		Owner: limit.KeyView{Node: "owner", Held: true, Limit: c.Rule.Limit,
			Decision: limit.Decision{Remaining: 0, ResetAt: resetAt, RetryAfter: limit.Never}},
		Replica: limit.KeyView{Node: "replica", Held: true, Limit: c.Rule.Limit, WindowEnd: resetAt, Previous: 1, Current: 2,
			Decision: limit.Decision{Allowed: true, Remaining: 3, ResetAt: resetAt}},
	}, nil
}

// The Inspect service and the Client's Inspect carry a check and both
// views across gRPC; a caller's mistake is InvalidArgument.
func TestInspectOverGRPC(t *testing.T) {
	t.Parallel()
	fi := fakeInspector{got: make(chan limit.Check, 4)}
	_, target, dialer := startGRPC(t, fi)
	c := dialClient(t, target, dialer)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	check := limit.Check{Name: "api", Key: "account:1", Hits: 7, Rule: limit.Rule{Algorithm: limit.SlidingWindow, Limit: 5, Period: time.Minute}}
	in, err := c.Inspect(ctx, check)
	if err != nil {
		t.Fatal(err)
	}
	sent := <-fi.got
	check.Hits = 0
	if sent != check {
		t.Errorf("the inspector got %+v, want %+v (hits not sent)", sent, check)
	}
	if o := in.Owner; o.Node != "owner" || !o.Held || o.Allowed || o.RetryAfter != limit.Never || o.Limit != 5 {
		t.Errorf("owner view = %+v", o)
	}
	wantEnd := (resetAt + 999_999) / 1_000_000 * 1_000_000 // whole ms, rounded up
	if r := in.Replica; r.Node != "replica" || !r.Allowed || r.Remaining != 3 || r.Current != 2 || r.Previous != 1 || r.WindowEnd != wantEnd {
		t.Errorf("replica view = %+v", r)
	}
	_, err = c.Inspect(ctx, limit.Check{Name: "invalid", Key: "k"})
	<-fi.got
	if status.Code(errors.Unwrap(err)) != codes.InvalidArgument {
		t.Errorf("Inspect of an unknown rule: %v, want InvalidArgument", err)
	}
	if _, err := c.Inspect(ctx, limit.Check{Name: "api", Key: "k", Rule: limit.Rule{Algorithm: 9, Limit: 1, Period: time.Second}}); status.Code(errors.Unwrap(err)) != codes.InvalidArgument {
		t.Errorf("Inspect with an unknown algorithm: %v, want InvalidArgument", err)
	}
}

// GET /v1/keys answers JSON, refuses bad parameters with 400, and, when the
// in-flight bound is full, 429 with Retry-After.
func TestInspectOverHTTP(t *testing.T) {
	t.Parallel()
	fi := fakeInspector{got: make(chan limit.Check, 4)}
	bound := server.NewInFlight(1)
	hh := server.NewHTTP(server.HTTPConfig{InFlight: bound})
	RegisterHTTP(hh, fi)
	var h http.Handler = hh
	get := func(query string) (*httptest.ResponseRecorder, map[string]any) {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/v1/keys?"+query, nil))
		var out map[string]any
		if err := json.Unmarshal(w.Body.Bytes(), &out); err != nil {
			t.Fatalf("GET /v1/keys?%s: %q is not JSON", query, w.Body)
		}
		return w, out
	}
	w, out := get("name=api&key=account:1&limit=5&duration_ms=60000&algorithm=sliding_window&calendar=0")
	if w.Code != http.StatusOK || out["owner"] != "owner" {
		t.Fatalf("GET /v1/keys = %d %v", w.Code, out)
	}
	if got := <-fi.got; got.Key != "account:1" || got.Rule.Algorithm != limit.SlidingWindow || got.Rule.Period != time.Minute {
		t.Errorf("the inspector got %+v", got)
	}
	if st := out["owner_state"].(map[string]any); st["status"] != "OVER_LIMIT" || st["retry_after_ms"] != "-1" {
		t.Errorf("owner_state = %v", st)
	}
	for _, q := range []string{"name=api&key=k&limit=ten", "name=api&key=k&algorithm=MAGIC", "name=api&key=k&extra=1", "name=invalid&key=k"} {
		if w, out := get(q); w.Code != http.StatusBadRequest || out["error"] == nil {
			t.Errorf("GET /v1/keys?%s = %d %v, want 400 with an error", q, w.Code, out)
		}
		if q == "name=invalid&key=k" {
			<-fi.got
		}
	}
	if !bound.TryAcquire(1) {
		t.Fatal("bound not free")
	}
	w, out = get("name=api&key=k&limit=5&duration_ms=1000")
	bound.Release(1)
	if w.Code != http.StatusTooManyRequests || w.Header().Get("Retry-After") == "" || out["error"] == nil {
		t.Errorf("GET /v1/keys with the bound full = %d %v, want 429 with Retry-After", w.Code, out)
	}
	w = httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/v1/keys", nil))
	if w.Code != http.StatusMethodNotAllowed {
		t.Errorf("POST /v1/keys = %d, want 405", w.Code)
	}
}
