package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shardlimiter/shardlimiter/internal/poll"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/shardlimiter/shardlimiter/limit"
	"github.com/shardlimiter/shardlimiter/transport/dial"
	"github.com/shardlimiter/shardlimiter/transport/pb"
)

// served is a shardlimiter started by run() in this process.
type served struct {
	http, grpc, peer, health string
	resp                     string // with --resp-addr
	stop                     context.CancelFunc
	exit                     chan int
	stderr                   *syncBuffer
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// serve runs the server on loopback ports chosen by the kernel and waits
// for its "serving" line.
func serve(t testing.TB, extra ...string) *served {
	t.Helper()
	args := append([]string{"--http-addr", "127.0.0.1:0", "--grpc-addr", "127.0.0.1:0", "--peer-addr", "127.0.0.1:0", "--gossip-addr", "127.0.0.1:0", "--log-level", "warn"}, extra...)
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	s := &served{stop: cancel, exit: make(chan int, 1), stderr: &syncBuffer{}}
	go func() {
		s.exit <- run(ctx, args, env(), pw, s.stderr)
		pw.Close()
	}()
	line, err := bufio.NewReader(pr).ReadString('\n')
	if err != nil {
		t.Fatalf("no serving line: %v; stderr: %s", err, s.stderr)
	}
	go io.Copy(io.Discard, pr)
	for _, f := range strings.Fields(line) {
		if v, ok := strings.CutPrefix(f, "http="); ok {
			s.http = v
		}
		if v, ok := strings.CutPrefix(f, "grpc="); ok {
			s.grpc = v
		}
		if v, ok := strings.CutPrefix(f, "peer="); ok {
			s.peer = v
		}
		if v, ok := strings.CutPrefix(f, "health="); ok {
			s.health = v
		}
		if v, ok := strings.CutPrefix(f, "resp="); ok {
			s.resp = v
		}
	}
	t.Cleanup(func() {
		cancel()
		if code := <-s.exit; code != exitOK {
			t.Errorf("run exited %d; stderr: %s", code, s.stderr)
		}
	})
	return s
}

func postJSON(t *testing.T, url, body string) (int, map[string]any) {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatalf("POST %s: body is not JSON: %v", url, err)
	}
	return resp.StatusCode, out
}

// TestEndToEndEveryAlgorithm drives every algorithm through real gRPC and
// real HTTP: admission up to the limit, peek, reset and count-rejected.
func TestEndToEndEveryAlgorithm(t *testing.T) {
	t.Parallel()
	s := serve(t)
	client, err := dial.Dial(s.grpc)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	ctx := context.Background()
	for _, a := range limit.Algorithms() {
		r := limit.Rule{Algorithm: a, Limit: 3, Period: time.Hour}
		if a == limit.LeakyBucket {
			r.Burst = 2
		}
		key := "acct-" + a.String()
		chk := func(hits int64, b limit.Behavior) limit.Result {
			rr := r
			rr.Behavior = b
			res, err := client.GetRateLimits(ctx, []limit.Check{{Name: "e2e", Key: key, Hits: hits, Rule: rr}})
			if err != nil || len(res) != 1 || res[0].Error != "" {
				t.Fatalf("%v: GetRateLimits = %+v, %v", a, res, err)
			}
			return res[0]
		}
		for i := range 3 {
			if got := chk(1, 0); !got.Allowed {
				t.Fatalf("%v: hit %d rejected: %+v", a, i+1, got)
			}
		}
		if got := chk(1, 0); got.Allowed || got.RetryAfter <= 0 {
			t.Fatalf("%v: 4th hit = %+v, want rejected with a retry-after", a, got)
		}
		if got := chk(0, 0); got.Remaining != 0 || got.Owner == "" {
			t.Fatalf("%v: peek = %+v, want 0 remaining and an owner", a, got)
		}
		if got := chk(1, limit.Reset); !got.Allowed || got.Remaining != 2 {
			t.Fatalf("%v: reset + hit = %+v, want admitted with 2 left", a, got)
		}
		// The same over HTTP with proto field names, on a fresh key.
		body := fmt.Sprintf(`{"requests":[{"name":"e2e","unique_key":"http-%[1]s","hits":3,"limit":3,"duration_ms":3600000,"algorithm":"%[1]s","burst":%[2]d},
			{"name":"e2e","uniqueKey":"http-%[1]s","hits":1,"limit":3,"durationMs":3600000,"algorithm":"%[1]s","burst":%[2]d,"behavior":"COUNT_REJECTED"}]}`, a, r.Burst)
		code, out := postJSON(t, "http://"+s.http+"/v1/GetRateLimits", body)
		resps, _ := out["responses"].([]any)
		if code != 200 || len(resps) != 2 {
			t.Fatalf("%v: HTTP %d %v", a, code, out)
		}
		first, second := resps[0].(map[string]any), resps[1].(map[string]any)
		if first["status"] != "UNDER_LIMIT" || second["status"] != "OVER_LIMIT" {
			t.Fatalf("%v: HTTP statuses %v, %v; want UNDER_LIMIT, OVER_LIMIT", a, first["status"], second["status"])
		}
		for _, field := range []string{"reset_time_ms", "retry_after_ms", "delay_ms", "remaining", "error", "metadata"} {
			if _, ok := first[field]; !ok {
				t.Fatalf("%v: HTTP answer lacks %q: %v", a, field, first)
			}
		}
	}
}

func TestBadRequestsOverHTTP(t *testing.T) {
	t.Parallel()
	s := serve(t, "--max-batch", "2")
	url := "http://" + s.http + "/v1/GetRateLimits"
	cases := []struct{ body, want string }{
		{`{"requests":[`, "bad JSON"},
		{`{"requests":[{},{},{}]}`, "exceeds the limit of 2"},
		{`{"requestz":[]}`, "unknown field"},
	}
	for _, tc := range cases {
		code, out := postJSON(t, url, tc.body)
		msg, _ := out["error"].(string)
		if code != http.StatusBadRequest || !strings.Contains(msg, tc.want) {
			t.Errorf("POST %q = %d %v, want 400 with %q", tc.body, code, out, tc.want)
		}
	}
	// A bad item is answered alone; its neighbour is decided.
	code, out := postJSON(t, url, `{"requests":[{"name":"r","unique_key":"k","hits":-1,"limit":1,"duration_ms":1000},{"name":"r","unique_key":"k","hits":1,"limit":1,"duration_ms":1000}]}`)
	resps, _ := out["responses"].([]any)
	if code != 200 || len(resps) != 2 || !strings.Contains(resps[0].(map[string]any)["error"].(string), "hits must be >= 0") ||
		resps[1].(map[string]any)["status"] != "UNDER_LIMIT" {
		t.Fatalf("mixed batch = %d %v", code, out)
	}
}

func TestHealthReadyClusterMetrics(t *testing.T) {
	t.Parallel()
	s := serve(t)
	// The serving line comes before gossip has started: ready soon after.
	poll.Until(t, 5*time.Second, func() bool {
		resp, err := http.Get("http://" + s.http + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, "condition")
	for path, want := range map[string]string{
		"/healthz":    "ok",
		"/readyz":     "ready",
		"/v1/cluster": `"members"`,
		"/metrics":    "shardlimiter_ring_members 1",
	} {
		resp, err := http.Get("http://" + s.http + path)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !strings.Contains(string(b), want) {
			t.Errorf("GET %s = %d %.200s, want 200 containing %q", path, resp.StatusCode, b, want)
		}
	}
}

// TestShutdownAnswersAcceptedRequests starts a request, cancels the run
// context (as SIGTERM does) while the server is still reading its body,
// then finishes the body: the request accepted before shutdown is answered.
func TestShutdownAnswersAcceptedRequests(t *testing.T) {
	t.Parallel()
	s := serve(t)
	conn, err := net.Dial("tcp", s.http)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	body := `{"requests":[{"name":"r","unique_key":"k","hits":1,"limit":5,"duration_ms":1000}]}`
	fmt.Fprintf(conn, "POST /v1/GetRateLimits HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body[:10])
	// The server is up and our connection is accepted before shutdown.
	poll.Until(t, 5*time.Second, func() bool {
		resp, err := http.Get("http://" + s.http + "/healthz")
		if err == nil {
			resp.Body.Close()
		}
		return err == nil
	}, "condition")
	s.stop()
	// Shutdown has begun once the listener refuses new connections; it is
	// then waiting for our request. Send the rest of the body.
	poll.Until(t, 5*time.Second, func() bool {
		c, err := net.Dial("tcp", s.http)
		if err == nil {
			c.Close()
		}
		return err != nil
	}, "condition")
	if _, err := io.WriteString(conn, body[10:]); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("accepted request not answered after shutdown began: %v", err)
	}
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || !strings.Contains(string(b), "UNDER_LIMIT") {
		t.Fatalf("answer = %d %s", resp.StatusCode, b)
	}
}

func TestCheckSubcommand(t *testing.T) {
	t.Parallel()
	s := serve(t)
	check := func(args ...string) (int, string) {
		var out, errOut bytes.Buffer
		code := run(context.Background(), append([]string{"check", "--server", s.grpc}, args...), env(), &out, &errOut)
		return code, out.String() + errOut.String()
	}
	args := []string{"--name", "cli", "--key", "account:42", "--limit", "1", "--duration", "1m"}
	if code, out := check(args...); code != exitOK || !strings.Contains(out, "UNDER_LIMIT") || !strings.Contains(out, "0 of 1 left") {
		t.Fatalf("first check: exit %d\n%s", code, out)
	}
	if code, out := check(args...); code != exitFail || !strings.Contains(out, "OVER_LIMIT") || !strings.Contains(out, "retry after") {
		t.Fatalf("second check: exit %d\n%s", code, out)
	}
	// Without --limit the node is asked for its rules file's rule of that
	// name (TestCLINamesTheNodeOneWay); this one has none, and says so.
	if code, out := check("--name", "cli", "--key", "k"); code != exitFail || !strings.Contains(out, "no rules file") {
		t.Fatalf("check without --limit on a node without rules: exit %d\n%s", code, out)
	}
	if code, out := check("--name", "cli", "--key", "k", "--limit", "0"); code != exitUsage || !strings.Contains(out, "limit must be > 0") {
		t.Fatalf("check with --limit 0: exit %d\n%s", code, out)
	}
	if code, out := check("--name", "cli", "--key", "k", "--limit", "1", "--algorithm", "MAGIC"); code != exitUsage || !strings.Contains(out, "unknown --algorithm") {
		t.Fatalf("check with a bad algorithm: exit %d\n%s", code, out)
	}
}

func TestPprofOnlyWhenAsked(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want int
	}{{nil, http.StatusNotFound}, {[]string{"--pprof"}, http.StatusOK}} {
		s := serve(t, tc.args...)
		resp, err := http.Get("http://" + s.http + "/debug/pprof/")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("%v: GET /debug/pprof/ = %d, want %d", tc.args, resp.StatusCode, tc.want)
		}
	}
}

// TestBadItemsOverGRPC sends a batch mixing good and bad items to a real
// node over gRPC with the generated client: each bad item gets its own
// clear error and reason, the good ones are decided, and an over-size batch
// fails the whole call with InvalidArgument.
func TestBadItemsOverGRPC(t *testing.T) {
	t.Parallel()
	s := serve(t, "--max-batch", "20")
	conn, err := grpc.NewClient(s.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := pb.NewRateLimiterClient(conn)
	good := func() *pb.RateLimitRequest {
		return &pb.RateLimitRequest{Name: "r", UniqueKey: "k", Hits: 1, Limit: 100, DurationMs: 1000}
	}
	cases := []struct {
		mod  func(*pb.RateLimitRequest)
		want string
	}{
		{func(r *pb.RateLimitRequest) { r.Name = "" }, "name is empty"},
		{func(r *pb.RateLimitRequest) { r.UniqueKey = "" }, "unique_key is empty"},
		{func(r *pb.RateLimitRequest) { r.UniqueKey = strings.Repeat("k", 2000) }, "unique_key is 2000 bytes"},
		{func(r *pb.RateLimitRequest) { r.Limit = 0 }, "limit must be > 0"},
		{func(r *pb.RateLimitRequest) { r.DurationMs = 0 }, "duration_ms"},
		{func(r *pb.RateLimitRequest) { r.DurationMs = 1 << 60 }, "duration_ms"},
		{func(r *pb.RateLimitRequest) { r.Hits = -1 }, "hits must be >= 0"},
		{func(r *pb.RateLimitRequest) { r.Algorithm = 42 }, "algorithm"},
		{func(r *pb.RateLimitRequest) { r.WarmupMs = 10; r.Algorithm = pb.Algorithm_FIXED_WINDOW }, "warmup_ms applies to TOKEN_BUCKET only"},
		{func(r *pb.RateLimitRequest) { r.MinIntervalMs = 10 }, "min_interval_ms applies to SLIDING_LOG only"},
		{func(r *pb.RateLimitRequest) { r.Behavior = 64 }, "behavior"},
	}
	req := &pb.GetRateLimitsRequest{}
	for _, tc := range cases {
		bad := good()
		tc.mod(bad)
		req.Requests = append(req.Requests, good(), bad)
	}
	if _, err := client.GetRateLimits(context.Background(), req); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("batch of %d over --max-batch 20: err = %v, want InvalidArgument", len(req.Requests), err)
	}
	req.Requests = req.Requests[:20]
	resp, err := client.GetRateLimits(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	for i, tc := range cases[:10] {
		g, b := resp.Responses[2*i], resp.Responses[2*i+1]
		if g.Error != "" || g.Status != pb.Status_UNDER_LIMIT || g.Metadata["owner"] == "" {
			t.Errorf("good item next to %q: %v", tc.want, g)
		}
		if !strings.Contains(b.Error, tc.want) || b.Metadata["reason"] != "invalid_argument" {
			t.Errorf("bad item: error %q reason %q, want %q, invalid_argument", b.Error, b.Metadata["reason"], tc.want)
		}
	}
}

// TestHealthFollowsReadiness: a node whose seed never answers has not
// joined, so /readyz is 503 and gRPC health NOT_SERVING; a node alone by
// configuration is ready on both.
func TestHealthFollowsReadiness(t *testing.T) {
	t.Parallel()
	dead, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	deadAddr := dead.Addr().String()
	dead.Close()
	for _, tc := range []struct {
		args  []string
		ready bool
	}{{nil, true}, {[]string{"--join", deadAddr}, false}} {
		s := serve(t, tc.args...)
		conn, err := grpc.NewClient(s.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		want := healthpb.HealthCheckResponse_NOT_SERVING
		if tc.ready {
			want = healthpb.HealthCheckResponse_SERVING
		}
		var got healthpb.HealthCheckResponse_ServingStatus
		var code int
		poll.Until(t, 5*time.Second, func() bool {
			r, err := healthpb.NewHealthClient(conn).Check(context.Background(), &healthpb.HealthCheckRequest{})
			if err == nil {
				got = r.Status
			}
			resp, err := http.Get("http://" + s.http + "/readyz")
			if err == nil {
				code = resp.StatusCode
				resp.Body.Close()
			}
			return got == want && (code == 200) == tc.ready
		}, "condition")
	}
}
