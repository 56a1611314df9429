package native

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/shardlimiter/shardlimiter/transport"
	"github.com/shardlimiter/shardlimiter/transport/server"
)

// startHTTP serves cfg with httptest for the test's lifetime.
func startHTTP(t testing.TB, cfg httpConfig) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(newHTTPHandler(cfg))
	t.Cleanup(srv.Close)
	return srv
}

// do sends one request and returns the status and decoded JSON body.
func do(t testing.TB, srv *httptest.Server, method, path, body string) (int, map[string]any) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctxTimeout(t), method, srv.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatalf("%s %s = %v", method, path, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: reading body: %v", method, path, err)
	}
	isJSON := strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json")
	if !isJSON && path != "/metrics" {
		t.Errorf("%s %s: Content-Type %q, want application/json", method, path, resp.Header.Get("Content-Type"))
	}
	var out map[string]any
	if method != http.MethodHead && isJSON {
		if err := json.Unmarshal(raw, &out); err != nil {
			t.Fatalf("%s %s: body %q is not JSON: %v", method, path, raw, err)
		}
	}
	return resp.StatusCode, out
}

func TestHTTPGetRateLimits(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		body string
	}{
		{name: "proto names", body: `{"requests":[
			{"name":"rule","unique_key":"a","hits":1,"limit":10,"duration_ms":1000},
			{"name":"rule","unique_key":"b","hits":"1","limit":10,"duration_ms":"1000","algorithm":"SLIDING_LOG","min_interval_ms":0},
			{"name":"rule","unique_key":"c","hits":1,"limit":10,"duration_ms":0}]}`},
		{name: "JSON names", body: `{"requests":[
			{"name":"rule","uniqueKey":"a","hits":1,"limit":10,"durationMs":1000},
			{"name":"rule","uniqueKey":"b","hits":1,"limit":10,"durationMs":1000,"algorithm":4,"minIntervalMs":"0"},
			{"name":"rule","uniqueKey":"c","hits":1,"limit":10,"durationMs":0}]}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			fake := &fakeChecker{Owner: "node-a"}
			srv := startHTTP(t, httpConfig{Checker: fake})
			code, body := do(t, srv, http.MethodPost, "/v1/GetRateLimits", tt.body)
			if code != http.StatusOK {
				t.Fatalf("POST /v1/GetRateLimits = %d %v, want 200", code, body)
			}
			resps, _ := body["responses"].([]any)
			if len(resps) != 3 {
				t.Fatalf("POST /v1/GetRateLimits answered %v, want 3 items", body)
			}
			first := resps[0].(map[string]any)
			want := map[string]any{"status": "UNDER_LIMIT", "limit": "10", "remaining": "9",
				"reset_time_ms": "1700000000124", "retry_after_ms": "0", "delay_ms": "0", "error": "",
				"metadata": map[string]any{"owner": "node-a"}}
			if fmt.Sprint(first) != fmt.Sprint(want) {
				t.Errorf("item 0 = %v, want %v (proto names, unpopulated fields emitted)", first, want)
			}
			if e := resps[2].(map[string]any)["error"]; e != "duration_ms must be > 0, got 0" {
				t.Errorf("item 2 error = %v, want the duration_ms message", e)
			}
			if keys := batchKeys(fake.Got()); !slices.EqualFunc(keys, [][]string{{"a", "b"}}, slices.Equal) {
				t.Errorf("transport.Checker got %q, want [[a b]]", keys)
			}
		})
	}
}

func TestHTTPErrors(t *testing.T) {
	t.Parallel()
	item := `{"name":"r","unique_key":"k","hits":1,"limit":1,"duration_ms":1}`
	batch := func(n int) string {
		return `{"requests":[` + strings.TrimSuffix(strings.Repeat(item+",", n), ",") + `]}`
	}
	tests := []struct {
		name    string
		cfg     httpConfig
		method  string
		path    string
		body    string
		want    int
		wantErr string // substring of the "error" field
	}{
		{name: "bad JSON", method: "POST", path: "/v1/GetRateLimits", body: `{"requests":[`, want: 400, wantErr: "bad JSON"},
		{name: "not an object", method: "POST", path: "/v1/GetRateLimits", body: `[1,2]`, want: 400, wantErr: "bad JSON"},
		{name: "empty body", method: "POST", path: "/v1/GetRateLimits", body: ``, want: 400, wantErr: "empty request body"},
		{name: "blank body", method: "POST", path: "/v1/GetRateLimits", body: " \n", want: 400, wantErr: "empty request body"},
		{name: "field named as documented", method: "POST", path: "/v1/GetRateLimits", body: `{"requests":[{"durationMs":"x"}]}`, want: 400, wantErr: "field duration_ms:"},
		{name: "enum of the wrong type", method: "POST", path: "/v1/GetRateLimits", body: `{"requests":[{"algorithm":true}]}`, want: 400, wantErr: "bad JSON"},
		{name: "unknown field", method: "POST", path: "/v1/GetRateLimits", body: `{"requests":[{"nme":"x"}]}`, want: 400, wantErr: "nme"},
		{name: "wrong type", method: "POST", path: "/v1/GetRateLimits", body: `{"requests":[{"hits":"many"}]}`, want: 400, wantErr: "bad JSON"},
		{name: "batch over limit", cfg: httpConfig{MaxBatch: 2}, method: "POST", path: "/v1/GetRateLimits", body: batch(3), want: 400, wantErr: "limit of 2 items"},
		{name: "batch at limit", cfg: httpConfig{MaxBatch: 2}, method: "POST", path: "/v1/GetRateLimits", body: batch(2), want: 200},
		{name: "braces in strings do not count", cfg: httpConfig{MaxBatch: 1}, method: "POST", path: "/v1/GetRateLimits",
			body: `{"requests":[{"name":"{{{\"{{","unique_key":"k}","hits":1,"limit":1,"duration_ms":1}]}`, want: 200},
		{name: "default batch limit", method: "POST", path: "/v1/GetRateLimits", body: batch(1001), want: 400, wantErr: "limit of 1000 items"},
		{name: "body too large", cfg: httpConfig{MaxBodyBytes: 100}, method: "POST", path: "/v1/GetRateLimits", body: batch(5), want: 413},
		{name: "wrong method", method: "GET", path: "/v1/GetRateLimits", want: 405, wantErr: "use POST"},
		{name: "POST to a probe", method: "POST", path: "/healthz", want: 405},
		{name: "unknown path", method: "GET", path: "/v2/nothing", want: 404},
		{name: "shutting down", cfg: httpConfig{Checker: &fakeChecker{Err: transport.ErrShuttingDown}}, method: "POST",
			path: "/v1/GetRateLimits", body: batch(1), want: 503, wantErr: "shutting down"},
		{name: "checker deadline", cfg: httpConfig{Checker: &fakeChecker{Err: context.DeadlineExceeded}}, method: "POST",
			path: "/v1/GetRateLimits", body: batch(1), want: 504},
		{name: "no metrics handler", method: "GET", path: "/metrics", want: 404},
		{name: "no cluster view", method: "GET", path: "/v1/cluster", want: 404},
		{name: "no rings view", method: "GET", path: "/v1/cluster/rings", want: 404},
		{name: "POST to the rings", cfg: httpConfig{Rings: func(context.Context) any { return nil }}, method: "POST", path: "/v1/cluster/rings", want: 405},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if tt.cfg.Checker == nil {
				tt.cfg.Checker = &fakeChecker{}
			}
			srv := startHTTP(t, tt.cfg)
			code, body := do(t, srv, tt.method, tt.path, tt.body)
			if code != tt.want {
				t.Fatalf("%s %s = %d %v, want %d", tt.method, tt.path, code, body, tt.want)
			}
			if code == http.StatusOK {
				return
			}
			msg, ok := body["error"].(string)
			if !ok || !strings.Contains(msg, tt.wantErr) {
				t.Errorf("%s %s error = %q, want it to contain %q", tt.method, tt.path, msg, tt.wantErr)
			}
		})
	}
}

func TestHTTPProbes(t *testing.T) {
	t.Parallel()
	ready := false
	metrics := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "# metrics\n") })
	srv := startHTTP(t, httpConfig{
		Ready:   func() bool { return ready },
		Metrics: metrics,
		Cluster: func() any { return map[string]any{"self": "node-a", "members": []string{"node-a", "node-b"}} },
		Rings:   func(context.Context) any { return map[string]any{"agree": true} },
	})
	tests := []struct {
		name  string
		path  string
		ready bool
		want  int
		key   string
		value any
	}{
		{name: "alive", path: "/healthz", want: 200, key: "status", value: "ok"},
		{name: "not ready", path: "/readyz", want: 503, key: "status", value: "not ready"},
		{name: "ready", path: "/readyz", ready: true, want: 200, key: "status", value: "ready"},
		{name: "cluster", path: "/v1/cluster", want: 200, key: "self", value: "node-a"},
		{name: "rings", path: "/v1/cluster/rings", want: 200, key: "agree", value: true},
		{name: "metrics", path: "/metrics", want: 200},
	}
	for _, tt := range tests { // sequential: ready is shared
		ready = tt.ready
		code, body := do(t, srv, http.MethodGet, tt.path, "")
		if code != tt.want || (tt.key != "" && body[tt.key] != tt.value) {
			t.Errorf("GET %s = %d %v, want %d with %s=%v", tt.path, code, body, tt.want, tt.key, tt.value)
		}
	}
}

// FuzzHTTPBody feeds arbitrary bodies to POST /v1/GetRateLimits: it never
// panics, answers 200, 400 or 413, and the body is always JSON.
func FuzzHTTPBody(f *testing.F) {
	seeds := []string{
		``, `{}`, `null`, `{"requests":[]}`, `{"requests":[{}]}`, `{"requests":[{},{},{},{},{}]}`,
		`{"requests":[{"name":"r","unique_key":"k","hits":1,"limit":1,"duration_ms":1}]}`,
		`{"requests":[{"name":"r","uniqueKey":"k","hits":"-1","limit":"9223372036854775807","durationMs":"9223372036854775807","algorithm":"SLIDING_LOG","behavior":7}]}`,
		`{"requests":[{"algorithm":99,"behavior":-1,"warmup_ms":-5}]}`,
		`{"requests":[{"name":"\u0000\ud800","unique_key":"{{{{"}]}`, `{"requests":[[[[[]]]]]}`, "\xff\xfe",
	}
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	h := newHTTPHandler(httpConfig{Checker: &fakeChecker{Owner: "fuzz"}, MaxBatch: 4, MaxBodyBytes: 4096})
	f.Fuzz(func(t *testing.T, body []byte) {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest(http.MethodPost, "/v1/GetRateLimits", strings.NewReader(string(body)))
		h.ServeHTTP(rec, req)
		switch rec.Code {
		case http.StatusOK, http.StatusBadRequest, http.StatusRequestEntityTooLarge:
		default:
			t.Fatalf("POST %q = %d %s, want 200, 400 or 413", body, rec.Code, rec.Body)
		}
		if !json.Valid(rec.Body.Bytes()) {
			t.Fatalf("POST %q answered %q, not JSON", body, rec.Body)
		}
	})
}

// BenchmarkHTTPBatch100 is one POST /v1/GetRateLimits of a 100-item batch
// through the handler (no network): body read, JSON both ways, and the
// default in-flight and body-bytes bounds.
func BenchmarkHTTPBatch100(b *testing.B) {
	h := newHTTPHandler(httpConfig{Checker: trivialChecker,
		InFlight: server.NewFairInFlight(server.DefaultInFlightChecks(0)), BodyBytes: server.NewInFlight(server.DefaultBodyBytes)})
	var body strings.Builder
	body.WriteString(`{"requests":[`)
	for i := range 100 {
		if i > 0 {
			body.WriteString(",")
		}
		fmt.Fprintf(&body, `{"name":"r","unique_key":"account:%d","hits":1,"limit":10,"duration_ms":1000}`, i)
	}
	body.WriteString(`]}`)
	raw := body.String()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			req := httptest.NewRequest(http.MethodPost, "/v1/GetRateLimits", strings.NewReader(raw))
			w := httptest.NewRecorder()
			h.ServeHTTP(w, req)
			if w.Code != http.StatusOK {
				b.Errorf("status %d: %s", w.Code, w.Body)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N*100)/b.Elapsed().Seconds(), "checks/s")
}
