package server

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/shardlimiter/shardlimiter/transport"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/shardlimiter/shardlimiter/limit"
)

// TestBoundChecker: a call takes one unit per check while next runs; one
// that does not fit is refused at once, as the native API refuses it.
func TestBoundChecker(t *testing.T) {
	t.Parallel()
	b := NewInFlight(3)
	next := &fakeChecker{Owner: "n"}
	c := BoundChecker(next, b, nil, ListenerGRPC)
	checks := []limit.Check{mkCheck("a", 1), mkCheck("b", 1)}
	if res, err := c.Check(context.Background(), checks); err != nil || len(res) != 2 {
		t.Fatalf("Check on an idle bound = %v, %v", res, err)
	}
	if n := b.InUse(); n != 0 {
		t.Fatalf("InUse after the call = %d, want 0", n)
	}
	b.TryAcquire(2) // another call holds 2 of 3
	if _, err := c.Check(context.Background(), checks); !transport.IsShed(transport.GRPCStatus(err)) {
		t.Fatalf("Check past the bound = %v, want a shed", err)
	}
	if _, err := c.Check(context.Background(), checks[:1]); err != nil {
		t.Fatalf("Check of 1 unit with 1 free = %v", err)
	}
	if BoundChecker(next, nil, nil, ListenerGRPC) != transport.Checker(next) {
		t.Errorf("BoundChecker with no bound wraps next")
	}
}

func TestWriteHTTPError(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		err   error
		code  int
		retry string
	}{
		{errShed, http.StatusTooManyRequests, "1"},
		{transport.GRPCStatus(errShed), http.StatusTooManyRequests, "1"},
		{status.Error(codes.InvalidArgument, "bad"), http.StatusBadRequest, ""},
		{status.Error(codes.ResourceExhausted, "message too large"), http.StatusTooManyRequests, ""},
		{transport.ErrUnavailable, http.StatusServiceUnavailable, ""},
	} {
		w := httptest.NewRecorder()
		if got := WriteHTTPError(w, tc.err); got != tc.code || w.Code != tc.code || w.Header().Get("Retry-After") != tc.retry {
			t.Errorf("WriteHTTPError(%v) = %d (Retry-After %q), want %d (%q)", tc.err, w.Code, w.Header().Get("Retry-After"), tc.code, tc.retry)
		}
	}
	if st := status.Convert(transport.GRPCStatus(status.Error(codes.InvalidArgument, "bad"))); st.Code() != codes.InvalidArgument || st.Message() != "bad" {
		t.Errorf("transport.GRPCStatus(a status) = %v, want it unchanged", st)
	}
}
