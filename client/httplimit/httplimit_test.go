package httplimit

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shardlimiter/shardlimiter/api/native"
	"github.com/shardlimiter/shardlimiter/transport/server"

	"go.uber.org/goleak"

	"github.com/shardlimiter/shardlimiter/client"
	"github.com/shardlimiter/shardlimiter/limit"
	"github.com/shardlimiter/shardlimiter/transport"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// now is the fixed clock of the tests' fake limiter and middleware.
var now = time.Unix(1_700_000_000, 0)

// counter is a fake limiter behind a real gRPC server: a fixed window of
// the rule's period that starts at now, so answers are exact.
type counter struct {
	mu   sync.Mutex
	used map[string]int64
}

func (c *counter) Check(_ context.Context, checks []limit.Check) ([]limit.Result, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]limit.Result, len(checks))
	for i, ch := range checks {
		d := limit.Decision{ResetAt: now.Add(ch.Rule.Period).UnixNano()}
		if c.used[ch.Key]+ch.Hits <= ch.Rule.Limit {
			c.used[ch.Key] += ch.Hits
			d.Allowed = true
		} else {
			d.RetryAfter = ch.Rule.Period - 500*time.Millisecond
		}
		d.Remaining = ch.Rule.Limit - c.used[ch.Key]
		out[i] = limit.Result{Decision: d, Owner: "fake"}
	}
	return out, nil
}

// serveLimiter starts the fake limiter on loopback and returns a client of it.
func serveLimiter(t *testing.T, checker transport.Checker) *client.Client {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := server.NewClientListener(server.Config{})
	native.Register(srv, checker, nil)
	done := make(chan struct{})
	go func() { defer close(done); srv.Serve(lis) }()
	t.Cleanup(func() { srv.Stop(); <-done })
	return newClient(t, lis.Addr().String())
}

func newClient(t *testing.T, addr string) *client.Client {
	t.Helper()
	c, err := client.New(context.Background(), client.Config{Targets: []string{addr}, NoRouting: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// deadAddr is a loopback address nobody listens on.
func deadAddr(t *testing.T) string {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close()
	return addr
}

var ok = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, "served") })

func middleware(t *testing.T, cfg Config) http.Handler {
	t.Helper()
	cfg.Now = func() time.Time { return now }
	if cfg.Key == nil {
		cfg.Key = func(r *http.Request) string { return r.Header.Get("X-Account") }
	}
	if cfg.Name == "" {
		cfg.Name = "api_per_minute"
	}
	if cfg.Rule == (limit.Rule{}) {
		cfg.Rule = limit.Rule{Algorithm: limit.FixedWindow, Limit: 3, Period: time.Minute}
	}
	mw, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return mw(ok)
}

func get(h http.Handler, account string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(http.MethodGet, "/", nil)
	if account != "" {
		req.Header.Set("X-Account", account)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

// sfItem parses a Structured Field list of one item, a String with
// Integer parameters, as a client of the draft would: `"name";a=1;b=2`.
func sfItem(t *testing.T, field string) (name string, params map[string]int64) {
	t.Helper()
	if len(field) < 2 || field[0] != '"' {
		t.Fatalf("field %q: not a String item", field)
	}
	end := 1
	var b strings.Builder
	for ; end < len(field) && field[end] != '"'; end++ {
		if field[end] == '\\' {
			end++
		}
		b.WriteByte(field[end])
	}
	if end == len(field) {
		t.Fatalf("field %q: unterminated String", field)
	}
	params = map[string]int64{}
	for _, p := range strings.Split(field[end+1:], ";")[1:] {
		k, v, found := strings.Cut(p, "=")
		n, err := strconv.ParseInt(v, 10, 64)
		if !found || err != nil || k == "" || strings.ContainsAny(k, " ,") {
			t.Fatalf("field %q: parameter %q is not key=Integer", field, p)
		}
		params[k] = n
	}
	if rest := field[end+1:]; rest != "" && rest[0] != ';' {
		t.Fatalf("field %q: junk after the item", field)
	}
	return b.String(), params
}

func TestAdmitThenReject(t *testing.T) {
	t.Parallel()
	h := middleware(t, Config{Checker: serveLimiter(t, &counter{used: map[string]int64{}})})
	for i := range 5 {
		rec := get(h, "acct-1")
		want := http.StatusOK
		if i >= 3 {
			want = http.StatusTooManyRequests
		}
		if rec.Code != want {
			t.Fatalf("request %d: status %d, want %d", i+1, rec.Code, want)
		}
		name, p := sfItem(t, rec.Header().Get("RateLimit-Policy"))
		if name != "api_per_minute" || p["q"] != 3 || p["w"] != 60 || len(p) != 2 {
			t.Errorf("request %d: RateLimit-Policy %q, want \"api_per_minute\";q=3;w=60", i+1, rec.Header().Get("RateLimit-Policy"))
		}
		name, p = sfItem(t, rec.Header().Get("RateLimit"))
		if wantR := max(0, int64(2-i)); name != "api_per_minute" || p["r"] != wantR || p["t"] != 60 {
			t.Errorf("request %d: RateLimit %q, want r=%d;t=60", i+1, rec.Header().Get("RateLimit"), wantR)
		}
		ra := rec.Header().Get("Retry-After")
		if want == http.StatusOK && ra != "" {
			t.Errorf("request %d admitted with Retry-After %q", i+1, ra)
		}
		if want == http.StatusTooManyRequests && ra != "60" { // 59.5 s, rounded up
			t.Errorf("request %d: Retry-After %q, want 60", i+1, ra)
		}
	}
	if rec := get(h, "acct-2"); rec.Code != http.StatusOK {
		t.Errorf("another key: status %d, want 200", rec.Code)
	}
	if rec := get(h, ""); rec.Code != http.StatusOK || rec.Header().Get("RateLimit") != "" {
		t.Errorf("no key: status %d, RateLimit %q; want served unlimited", rec.Code, rec.Header().Get("RateLimit"))
	}
}

func TestUnreachable(t *testing.T) {
	t.Parallel()
	c := newClient(t, deadAddr(t))
	for _, tc := range []struct {
		name     string
		failOpen bool
		want     int
	}{{"fail open", true, http.StatusOK}, {"fail closed", false, http.StatusServiceUnavailable}} {
		t.Run(tc.name, func(t *testing.T) {
			h := middleware(t, Config{Checker: c, FailOpen: tc.failOpen, UnavailableRetry: 2 * time.Second})
			rec := get(h, "acct")
			if rec.Code != tc.want {
				t.Fatalf("status %d, want %d", rec.Code, tc.want)
			}
			if rec.Header().Get("RateLimit") != "" {
				t.Errorf("RateLimit %q sent without a decision", rec.Header().Get("RateLimit"))
			}
			if ra := rec.Header().Get("Retry-After"); !tc.failOpen && ra != "2" {
				t.Errorf("fail-closed Retry-After %q, want 2", ra)
			}
		})
	}
}

func TestInvalidCheck(t *testing.T) {
	t.Parallel()
	// The middleware validates its rule; a node may still refuse a check
	// as invalid (stricter bounds), which is a configuration error.
	mw, err := New(Config{Checker: fakeInvalid{}, Name: "r", Key: func(*http.Request) string { return "k" },
		Rule: limit.Rule{Algorithm: limit.FixedWindow, Limit: 1, Period: time.Second}, FailOpen: true})
	if err != nil {
		t.Fatal(err)
	}
	if rec := get(mw(ok), "k"); rec.Code != http.StatusInternalServerError {
		t.Errorf("invalid check, fail open: status %d, want 500", rec.Code)
	}
	for _, cfg := range []Config{
		{Name: "r", Key: func(*http.Request) string { return "" }},
		{Checker: fakeInvalid{}, Name: "r"},
		{Checker: fakeInvalid{}, Name: "bad\nname", Key: func(*http.Request) string { return "" }},
		{Checker: fakeInvalid{}, Name: "r", Key: func(*http.Request) string { return "" }, Rule: limit.Rule{Limit: -1}},
	} {
		if _, err := New(cfg); err == nil {
			t.Errorf("New(%+v) succeeded", cfg)
		}
	}
}

type fakeInvalid struct{}

func (fakeInvalid) Check(context.Context, limit.Check) (limit.Result, error) {
	return limit.Result{}, &client.CheckError{Reason: limit.Invalid, Msg: "bad rule"}
}

func TestPolicyNameEscaped(t *testing.T) {
	if got := sfString(`a"b\c`); got != `"a\"b\\c"` {
		t.Errorf("sfString = %s", got)
	}
	name, _ := sfItem(t, sfString(`a"b\c`))
	if name != `a"b\c` {
		t.Errorf("round trip = %q", name)
	}
}
