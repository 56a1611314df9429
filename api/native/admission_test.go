package native

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"

	"github.com/shardlimiter/shardlimiter/internal/poll"
	"github.com/shardlimiter/shardlimiter/transport/pb"
	"github.com/shardlimiter/shardlimiter/transport/server"
)

// TestHTTPFairBetweenAddresses: while one client address holds what it may
// of a fair bound, its next call is refused with 429 before its body is
// read, and a call from another address is answered.
func TestHTTPFairBetweenAddresses(t *testing.T) {
	t.Parallel()
	bound := server.NewFairInFlight(16)
	h := server.NewHTTP(server.HTTPConfig{InFlight: bound})
	RegisterHTTP(h, &fakeChecker{Owner: "o"})
	held := httptest.NewRequest(http.MethodPost, "/v1/GetRateLimits", nil)
	held.RemoteAddr = "10.0.0.1:39999"
	hog, ok := h.Charge(held)
	if !ok || !hog.Settle(h, 14) { // its share 8, then borrowing to 14
		t.Fatal("a charge of 14 on an idle bound refused")
	}
	defer hog.Release()
	post := func(remote string) (*httptest.ResponseRecorder, *readCounter) {
		body := &readCounter{r: strings.NewReader(itemsJSON("k", 1))}
		req := httptest.NewRequest(http.MethodPost, "/v1/GetRateLimits", body)
		req.ContentLength = int64(body.r.Len())
		req.RemoteAddr = remote
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		return w, body
	}
	if w, body := post("10.0.0.1:40000"); w.Code != http.StatusTooManyRequests || body.read {
		t.Errorf("the holding address's next call = %d (body read: %v), want 429 before its body is read", w.Code, body.read)
	}
	if w, _ := post("10.0.0.2:40000"); w.Code != http.StatusOK {
		t.Errorf("another address's call = %d %s, want 200", w.Code, w.Body)
	}
	if got := bound.InUse(); got != 14 {
		t.Errorf("InUse() = %d after the calls, want the 14 still held", got)
	}
}

// TestHTTPShedsWith429: a call that does not fit the in-flight bound is
// answered 429 with Retry-After and a JSON body naming the delay.
func TestHTTPShedsWith429(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	bound := server.NewInFlight(10)
	srv := startHTTP(t, httpConfig{Checker: &fakeChecker{Owner: "o"}, InFlight: bound, Telemetry: server.NewMetrics(reg)})
	if !bound.TryAcquire(8) { // a call of 8 in progress
		t.Fatal("TryAcquire(8) on an idle bound failed")
	}
	resp, err := srv.Client().Post(srv.URL+"/v1/GetRateLimits", "application/json", strings.NewReader(itemsJSON("k", 5)))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") != "1" ||
		!strings.Contains(string(body), `"retry_after_ms":100`) || !strings.Contains(string(body), "too many checks in flight") {
		t.Fatalf("POST of 5 with 8 of 10 held = %d Retry-After %q %s; want 429, Retry-After 1 and retry_after_ms",
			resp.StatusCode, resp.Header.Get("Retry-After"), body)
	}
	if v, _ := sample(t, reg, "shardlimiter_transport_shed_total", "listener", "http", "resource", "checks"); v != 1 {
		t.Errorf("shed_total{http,checks} = %v, want 1", v)
	}
	bound.Release(8)
	if code, out := do(t, srv, http.MethodPost, "/v1/GetRateLimits", itemsJSON("k", 50)); code != http.StatusOK {
		t.Fatalf("POST of 50 (over the bound) on an idle server = %d %v, want 200", code, out)
	}
}

// TestHTTPBodyBytesBound: a body is reserved from its Content-Length before
// it is read; a request whose body does not fit is refused at once with
// 429, while the first is still uploading; once that one is answered, the
// same request is served.
func TestHTTPBodyBytesBound(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	budget := server.NewInFlight(1000)
	srv := startHTTP(t, httpConfig{Checker: &fakeChecker{Owner: "o"}, BodyBytes: budget, Telemetry: server.NewMetrics(reg)})
	slow := itemsJSON("slow", 10) // ~800 bytes
	pr, pw := io.Pipe()
	req, err := http.NewRequestWithContext(ctxTimeout(t), http.MethodPost, srv.URL+"/v1/GetRateLimits", pr)
	if err != nil {
		t.Fatal(err)
	}
	req.ContentLength = int64(len(slow))
	answered := make(chan int, 1)
	go func() {
		resp, err := srv.Client().Do(req)
		if err != nil {
			answered <- -1
			return
		}
		resp.Body.Close()
		answered <- resp.StatusCode
	}()
	if _, err := io.WriteString(pw, slow[:100]); err != nil {
		t.Fatal(err)
	}
	// The reservation is taken once the handler runs.
	poll.Until(t, 5*time.Second, func() bool { return budget.InUse() == int64(len(slow)) },
		"the slow request's %d bytes reserved (InUse %d)", len(slow), budget.InUse())
	small := itemsJSON("small", 5) // ~400 bytes: more than what is left
	code, out := do(t, srv, http.MethodPost, "/v1/GetRateLimits", small)
	if code != http.StatusTooManyRequests || !strings.Contains(fmt.Sprint(out["error"]), "request bytes") {
		t.Fatalf("POST of %d bytes with %d of 1000 reserved = %d %v, want 429", len(small), len(slow), code, out)
	}
	if v, _ := sample(t, reg, "shardlimiter_transport_shed_total", "listener", "http", "resource", "body_bytes"); v != 1 {
		t.Errorf("shed_total{http,body_bytes} = %v, want 1", v)
	}
	if _, err := io.WriteString(pw, slow[100:]); err != nil {
		t.Fatal(err)
	}
	pw.Close()
	if got := <-answered; got != http.StatusOK {
		t.Fatalf("slow request = %d, want 200", got)
	}
	if code, out := do(t, srv, http.MethodPost, "/v1/GetRateLimits", small); code != http.StatusOK {
		t.Fatalf("POST after the slow request = %d %v, want 200", code, out)
	}
	if budget.InUse() != 0 {
		t.Errorf("InUse() = %d after every request, want 0", budget.InUse())
	}
}

func TestMetricsAtTheBoundary(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewPedanticRegistry()
	m := server.NewMetrics(reg)
	_, target, dialer := startGRPC(t, testConfig{Checker: &fakeChecker{Owner: "a"}, Metrics: m, MaxBatch: 5})
	rpc := pb.NewRateLimiterClient(dialConn(t, target, dialer))
	reqs := []*pb.RateLimitRequest{wireReq("a", 1, nil), wireReq("b", 20, nil),
		wireReq("c", 1, func(r *pb.RateLimitRequest) { r.DurationMs = 0 }),
		wireReq("d", 1, func(r *pb.RateLimitRequest) { r.Algorithm = 42 }),
		wireReq("e", 0, nil)} // a peek
	if _, err := rpc.GetRateLimits(ctxTimeout(t), &pb.GetRateLimitsRequest{Requests: reqs}); err != nil {
		t.Fatalf("GetRateLimits = %v", err)
	}
	_, _ = rpc.GetRateLimits(ctxTimeout(t), &pb.GetRateLimitsRequest{Requests: append(reqs, reqs...)}) // over MaxBatch
	srv := startHTTP(t, httpConfig{Checker: &fakeChecker{}, Telemetry: m})
	do(t, srv, http.MethodPost, "/v1/GetRateLimits", `{"requests":[{"limit":"5"}]}`) // no duration_ms
	do(t, srv, http.MethodPost, "/v1/GetRateLimits", `{`)

	tests := []struct {
		name   string
		labels []string
		want   float64
		sum    float64 // histograms only
	}{
		{"shardlimiter_server_checks_total", []string{"algorithm", "TOKEN_BUCKET", "outcome", "under_limit"}, 1, 0},
		{"shardlimiter_server_checks_total", []string{"algorithm", "TOKEN_BUCKET", "outcome", "peek"}, 1, 0},
		{"shardlimiter_server_checks_total", []string{"algorithm", "FIXED_WINDOW", "outcome", "peek"}, 0, 0},
		{"shardlimiter_server_checks_total", []string{"algorithm", "TOKEN_BUCKET", "outcome", "over_limit"}, 1, 0},
		{"shardlimiter_server_checks_total", []string{"algorithm", "TOKEN_BUCKET", "outcome", "error"}, 2, 0}, // gRPC c + HTTP {"limit":"5"}
		{"shardlimiter_server_checks_total", []string{"algorithm", "unknown", "outcome", "error"}, 1, 0},
		{"shardlimiter_server_checks_total", []string{"algorithm", "SLIDING_LOG", "outcome", "under_limit"}, 0, 0},
		{"shardlimiter_server_item_errors_total", []string{"reason", "invalid_argument"}, 3, 0},
		{"shardlimiter_server_item_errors_total", []string{"reason", "unavailable"}, 0, 0},
		{"shardlimiter_server_request_duration_seconds", []string{"api", "grpc", "method", "GetRateLimits", "code", "OK"}, 1, -1},
		{"shardlimiter_server_request_duration_seconds", []string{"api", "grpc", "method", "GetRateLimits", "code", codes.InvalidArgument.String()}, 1, -1},
		{"shardlimiter_server_request_duration_seconds", []string{"api", "http", "code", "200"}, 1, -1},
		{"shardlimiter_server_request_duration_seconds", []string{"api", "http", "code", "400"}, 1, -1},
		{"shardlimiter_server_batch_size_items", []string{"api", "grpc", "method", "GetRateLimits"}, 2, 15},
		{"shardlimiter_server_batch_size_items", []string{"api", "http"}, 1, 1},
	}
	for _, tt := range tests {
		got, sum := sample(t, reg, tt.name, tt.labels...)
		if got != tt.want || (tt.sum >= 0 && sum != tt.sum) {
			t.Errorf("%s%v = %v (sum %v), want %v (sum %v)", tt.name, tt.labels, got, sum, tt.want, tt.sum)
		}
	}
}

// readCounter records whether its body was read.
type readCounter struct {
	r    *strings.Reader
	read bool
}

func (c *readCounter) Read(p []byte) (int, error) {
	c.read = true
	return c.r.Read(p)
}
