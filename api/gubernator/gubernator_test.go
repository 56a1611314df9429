package gubernator

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/shardlimiter/shardlimiter/transport"
	"github.com/shardlimiter/shardlimiter/transport/server"
	"github.com/shardlimiter/shardlimiter/transport/transporttest"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthgrpc "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/shardlimiter/shardlimiter/api/gubernator/gubpb"
	"github.com/shardlimiter/shardlimiter/gubernator"
	"github.com/shardlimiter/shardlimiter/limit"
	"github.com/shardlimiter/shardlimiter/table"
)

// gubNode is a one-table node: it validates each check and decides it on a
// gubernator table at a fixed instant; keys starting with "far" are
// answered as decided by node "far".
func gubNode(now time.Time) transport.Checker {
	g := gubernator.NewTable(table.Config{})
	return transport.CheckerFunc(func(_ context.Context, checks []limit.Check) ([]limit.Result, error) {
		out := make([]limit.Result, len(checks))
		for i, c := range checks {
			if err := c.Validate(); err != nil {
				out[i] = limit.Failed(limit.Invalid, err)
				continue
			}
			out[i] = limit.Result{Decision: g.Take(c.Name+"\x00"+c.Key, now.UnixNano(), c.Rule, c.Hits), Owner: "self"}
			if strings.HasPrefix(c.Key, "far") {
				out[i].Owner = "far"
			}
		}
		return out, nil
	})
}

var gubNow = time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)

var testConfig = Config{
	Checker: gubNode(gubNow), Self: "self",
	OwnerAddr: func(name string) string { return map[string]string{"far": "10.0.0.9:8081"}[name] },
	Health: func() Health {
		return Health{Healthy: true, Self: "10.0.0.1:8081", Peers: []string{"10.0.0.1:8081", "10.0.0.9:8081"}}
	},
}

// startGRPC serves gubernator's API on a client listener over bufconn for
// the test's lifetime; it returns the API, and a dial target and option
// that reach it.
func startGRPC(t testing.TB) (*API, string, grpc.DialOption) {
	t.Helper()
	l := server.NewClientListener(server.Config{Metrics: server.NewMetrics(nil)})
	g := Register(l, testConfig)
	target, opt := transporttest.Bufconn(t, l)
	return g, target, opt
}

func TestGubernatorGRPC(t *testing.T) {
	t.Parallel()
	_, target, dialer := startGRPC(t)
	conn, err := grpc.NewClient(target, dialer, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	c := gubpb.NewV1Client(conn)
	ctx := ctxTimeout(t)

	req := func(name, key string, hits int64) *gubpb.RateLimitReq {
		return &gubpb.RateLimitReq{Name: name, UniqueKey: key, Hits: hits, Limit: 2, Duration: 9000}
	}
	resp, err := c.GetRateLimits(ctx, &gubpb.GetRateLimitsReq{Requests: []*gubpb.RateLimitReq{
		req("n", "k", 1), req("", "k", 1), req("n", "", 1), req("", "", 1),
		{Name: "n", UniqueKey: "k2", Algorithm: 7}, req("n", "far:1", 1),
		{Name: "n", UniqueKey: "k3", Hits: 1, Limit: -1},
		{Name: "n", UniqueKey: "k4", Hits: 1, Limit: 1, Duration: 3, Behavior: gubpb.Behavior_DURATION_IS_GREGORIAN, Algorithm: gubpb.Algorithm_LEAKY_BUCKET},
	}})
	if err != nil {
		t.Fatal(err)
	}
	r := resp.GetResponses()
	reset := gubNow.UnixMilli() + 9000
	if r[0].GetError() != "" || r[0].GetRemaining() != 1 || r[0].GetLimit() != 2 || r[0].GetResetTime() != reset || r[0].GetMetadata() != nil {
		t.Errorf("item 0 = %v, want remaining 1, reset %d, no owner (decided here)", r[0], reset)
	}
	for i, want := range []string{"", "field 'namespace' cannot be empty", "field 'unique_key' cannot be empty",
		"field 'unique_key' cannot be empty",
		"Error while apply rate limit for 'n_k2': during workerPool.GetRateLimit: Invalid rate limit algorithm '7'", "", "limit must be in [0,",
		"Error while apply rate limit for 'n_k4': during workerPool.GetRateLimit: Error in leakyBucket: `Duration = GregorianWeeks` not yet supported; consider making a PR!`"} {
		if got := r[i].GetError(); !strings.HasPrefix(got, want) || (want == "") != (got == "") {
			t.Errorf("item %d error = %q, want %q", i, got, want)
		}
	}
	if got := r[5].GetMetadata()["owner"]; got != "10.0.0.9:8081" {
		t.Errorf("item decided by far: metadata owner = %q, want its address", got)
	}

	big := &gubpb.GetRateLimitsReq{}
	for range MaxBatch + 1 {
		big.Requests = append(big.Requests, req("n", "k", 0))
	}
	_, err = c.GetRateLimits(ctx, big)
	if s := status.Convert(err); s.Code() != codes.OutOfRange || s.Message() != "Requests.RateLimits list too large; max size is '1000'" {
		t.Errorf("1001 items: %v, want OUT_OF_RANGE with gubernator's text", err)
	}

	h, err := c.HealthCheck(ctx, &gubpb.HealthCheckReq{})
	if err != nil || h.GetStatus() != "healthy" || h.GetPeerCount() != 2 || h.GetAdvertiseAddress() != "10.0.0.1:8081" {
		t.Errorf("HealthCheck = %v, %v", h, err)
	}
	if _, err := c.LiveCheck(ctx, &gubpb.LiveCheckReq{}); err != nil {
		t.Errorf("LiveCheck = %v", err)
	}
	hs, err := healthgrpc.NewHealthClient(conn).Check(ctx, &healthgrpc.HealthCheckRequest{Service: ServiceName})
	if err != nil || hs.GetStatus() != healthgrpc.HealthCheckResponse_NOT_SERVING {
		t.Errorf("health of %s before SetServing = %v, %v; want listed, NOT_SERVING", ServiceName, hs, err)
	}
}

func TestGubernatorUnhealthy(t *testing.T) {
	t.Parallel()
	l := server.NewClientListener(server.Config{})
	defer l.Stop()
	g := Register(l, Config{Health: func() Health {
		return Health{Message: "this instance is not found in the peer list"}
	}, Closing: func() bool { return true }})
	if _, err := g.LiveCheck(context.Background(), &gubpb.LiveCheckReq{}); status.Code(err) != codes.Unavailable {
		t.Errorf("LiveCheck(closing) = %v, want Unavailable", err)
	}
	_, err := g.HealthCheck(context.Background(), &gubpb.HealthCheckReq{})
	if s := status.Convert(err); s.Code() != codes.Unavailable || s.Message() != "this instance is not found in the peer list" {
		t.Errorf("HealthCheck(unhealthy) = %v", err)
	}
}

func TestGubernatorHTTP(t *testing.T) {
	t.Parallel()
	g, _, _ := startGRPC(t)
	srv := httptest.NewServer(g.Gateway(server.NewHTTP(server.HTTPConfig{Metrics: server.NewMetrics(nil)})))
	t.Cleanup(srv.Close)
	do := func(method, path, body string) (int, string) {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctxTimeout(t), method, srv.URL+path, strings.NewReader(body))
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	// numbers as strings or numbers, enum names or numbers, camelCase or
	// proto names, unknown fields ignored
	code, body := do("POST", "/v1/GetRateLimits", `{"requests":[
		{"name":"n","unique_key":"h","hits":"1","limit":10,"duration":"1000","algorithm":"LEAKY_BUCKET","extra":true},
		{"name":"n","uniqueKey":"h2","hits":1,"limit":"10","duration":1000,"algorithm":0,"behavior":"DRAIN_OVER_LIMIT"}]}`)
	if code != 200 {
		t.Fatalf("POST /v1/GetRateLimits = %d %s", code, body)
	}
	var resp gubpb.GetRateLimitsResp
	if err := protojson.Unmarshal([]byte(body), &resp); err != nil {
		t.Fatalf("answer %s: %v", body, err)
	}
	if r := resp.GetResponses(); len(r) != 2 || r[0].GetRemaining() != 9 || r[1].GetRemaining() != 9 || r[1].GetStatus() != gubpb.Status_UNDER_LIMIT {
		t.Errorf("answers = %v", r)
	}
	for _, f := range []string{`"reset_time"`, `"status":"UNDER_LIMIT"`, `"error":""`, `"metadata":{}`} {
		if !strings.Contains(body, f) {
			t.Errorf("answer %s lacks %s (proto names, every field)", body, f)
		}
	}
	code, body = do("GET", "/v1/HealthCheck", "")
	for _, f := range []string{`"peer_count":2`, `"local_peers"`, `"region_peers":[]`, `"status":"healthy"`} {
		if code != 200 || !strings.Contains(body, f) {
			t.Errorf("GET /v1/HealthCheck = %d %s, want %s", code, body, f)
		}
	}
	if code, body = do("GET", "/v1/LiveCheck", ""); code != 200 || body != "{}" {
		t.Errorf("GET /v1/LiveCheck = %d %s", code, body)
	}
	for _, c := range []struct {
		method, path, body string
		code               int
		grpc               codes.Code
	}{
		{"POST", "/v1/GetRateLimits", `{"requests":`, 400, codes.InvalidArgument},
		{"POST", "/v1/GetRateLimits", `{"requests":[` + strings.Repeat(`{},`, 1000) + `{}]}`, 400, codes.OutOfRange},
		{"GET", "/v1/GetRateLimits", "", 405, codes.Unimplemented},
		{"GET", "/v1/Nothing", "", 404, codes.NotFound},
	} {
		code, body := do(c.method, c.path, c.body)
		want := `{"code":` + strconv.Itoa(int(c.grpc)) + `,"message":`
		if code != c.code || !strings.HasPrefix(body, want) || !strings.HasSuffix(body, `"details":[]}`) {
			t.Errorf("%s %s = %d %s, want %d %s…", c.method, c.path, code, body, c.code, want)
		}
	}
}

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

var ctxTimeout = transporttest.Ctx
