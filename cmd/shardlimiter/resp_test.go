package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shardlimiter/shardlimiter/internal/poll"
)

func redisClient(t *testing.T, addr string, opt func(*redis.Options)) *redis.Client {
	t.Helper()
	o := &redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second}
	if opt != nil {
		opt(o)
	}
	c := redis.NewClient(o)
	t.Cleanup(func() { c.Close() })
	return c
}

// TestRESPOnTheNode: CL.THROTTLE and SL.CHECK on --resp-addr of a real
// node, the calls in the server metrics under api="resp", and the port on
// the serving line.
func TestRESPOnTheNode(t *testing.T) {
	t.Parallel()
	s := serve(t, "--resp-addr", "127.0.0.1:0")
	if s.resp == "" {
		t.Fatal("the serving line names no resp address")
	}
	c := redisClient(t, s.resp, nil)
	ctx := context.Background()
	for i, want := range [][]int64{{0, 3, 2, -1, 1}, {0, 3, 1, -1, 2}, {0, 3, 0, -1, 3}, {1, 3, 0, 1, 3}} {
		got, err := c.Do(ctx, "CL.THROTTLE", "user:1", 2, 1, 1).Int64Slice()
		if err != nil || fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("call %d: CL.THROTTLE user:1 2 1 1 = %v, %v; want %v", i, got, err, want)
		}
	}
	got, err := c.Do(ctx, "SL.CHECK", "api", "acct:1", 2, 60_000, "ALGORITHM", "FIXED_WINDOW", "HITS", 2).Int64Slice()
	if err != nil || len(got) != 6 || got[0] != 0 || got[2] != 0 {
		t.Fatalf("SL.CHECK = %v, %v", got, err)
	}
	if err := c.Do(ctx, "SL.CHECK", "api", "acct:1", 2, 60_000, "ALGORITHM", "FIXED_WINDOW").Err(); err != nil {
		t.Fatal(err)
	}
	if got, _ := c.Do(ctx, "SL.CHECK", "api", "acct:1", 2, 60_000, "ALGORITHM", "FIXED_WINDOW").Int64Slice(); len(got) != 6 || got[0] != 1 {
		t.Errorf("third SL.CHECK = %v, want over the limit", got)
	}
	if err := c.Do(ctx, "SL.CHECK", "unknown_rule", "acct:1").Err(); err == nil || !strings.HasPrefix(err.Error(), "ERR ") {
		t.Errorf("SL.CHECK of a rule that is not loaded = %v, want an item error", err)
	}
	if cl := httpGet(t, "http://"+s.http+"/v1/cluster"); !strings.Contains(cl, `"resp_addr":"`+s.resp+`"`) {
		t.Errorf("/v1/cluster does not name the Redis listener %s: %s", s.resp, cl)
	}
	body := httpGet(t, "http://"+s.http+"/metrics")
	for _, series := range []string{
		`shardlimiter_server_request_duration_seconds_count{api="resp",code="OK",method="CL.THROTTLE"} 4`,
		`shardlimiter_server_checks_total{algorithm="CELL",outcome="over_limit"} 1`,
		`shardlimiter_server_checks_total{algorithm="FIXED_WINDOW",outcome="over_limit"} 2`,
		`shardlimiter_resp_connections 1`,
	} {
		if !strings.Contains(body, series) {
			t.Errorf("/metrics lacks %s", series)
		}
	}
}

func httpGet(t *testing.T, url string) string {
	t.Helper()
	r, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Body.Close()
	b, _ := io.ReadAll(r.Body)
	return string(b)
}

// TestRESPThroughRedisCLI: redis-cell's end-to-end steps through Debian's
// redis-cli (skipped without it), with AUTH from --resp-password-file.
func TestRESPThroughRedisCLI(t *testing.T) {
	t.Parallel()
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		t.Skip("redis-cli not installed (Debian: redis-tools)")
	}
	pwFile := filepath.Join(t.TempDir(), "pw")
	if err := os.WriteFile(pwFile, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s := serve(t, "--resp-addr", "127.0.0.1:0", "--resp-password-file", pwFile)
	host, port, _ := net.SplitHostPort(s.resp)
	run := func(pw string, args ...string) string {
		out, err := exec.Command(cli, append([]string{"-h", host, "-p", port, "--no-auth-warning", "-a", pw}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("redis-cli %v: %v\n%s", args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	if got := run("s3cret", "PING"); got != "PONG" {
		t.Fatalf("redis-cli PING = %q", got)
	}
	if got := run("s3cret", "CL.THROTTLE", "user123", "0", "1", "2", "1"); got != "0\n1\n0\n-1\n2" {
		t.Errorf("first CL.THROTTLE = %q, want 0 1 0 -1 2", got)
	}
	if got := run("s3cret", "CL.THROTTLE", "user123", "0", "1", "2", "1"); got != "1\n1\n0\n2\n2" {
		t.Errorf("second CL.THROTTLE = %q, want 1 1 0 2 2", got)
	}
	if got := run("s3cret", "CL.THROTTLE", "user123", "0", "1"); !strings.Contains(got, "Cell error: Usage: cl.throttle") {
		t.Errorf("wrong arity = %q", got)
	}
	if got := run("wrong", "PING"); !strings.Contains(got, "WRONGPASS") {
		t.Errorf("redis-cli with a wrong password = %q, want WRONGPASS", got)
	}
	if !strings.Contains(s.stderr.String(), "resp: AUTH refused") {
		t.Errorf("the refused AUTH is not logged:\n%s", s.stderr)
	}
	if n := metric(http.DefaultClient, "http://"+s.http, "shardlimiter_resp_auth_failures_total"); n != 1 {
		t.Errorf("shardlimiter_resp_auth_failures_total = %v, want 1", n)
	}
}

// TestRESPThreeNodesExact: one key's CL.THROTTLE calls entering every node
// of three in turn are decided by the key's owner: exactly max_burst+1
// admitted, and the replies count down as one node's would.
func TestRESPThreeNodesExact(t *testing.T) {
	t.Parallel()
	bin := buildBinary(t)
	hosts := []string{"127.0.0.5", "127.0.0.6", "127.0.0.7"}
	port := freeGossipPort(t, hosts...)
	seed := net.JoinHostPort(hosts[0], strconv.Itoa(port))
	var procs []*proc
	for _, h := range hosts {
		procs = append(procs, startProc(t, bin, h, port, seed, "--resp-addr", h+":0"))
	}
	poll.Until(t, 20*time.Second, func() bool {
		for _, p := range procs {
			if len(members(p)) != 3 {
				return false
			}
		}
		return true
	}, "three members on every node")
	ctx := context.Background()
	clients := make([]*redis.Client, len(procs))
	for i, p := range procs {
		clients[i] = redisClient(t, p.resp, nil)
	}
	const keys, burst, calls = 12, 9, 25 // 10 admitted per key per hour
	for k := range keys {
		key := fmt.Sprint("acct:", k)
		admitted := 0
		for h := range calls {
			c := clients[(k+h)%3]
			var v []int64
			var err error
			if h%5 == 4 { // some through pipelines
				p := c.Pipeline()
				cmd := p.Do(ctx, "CL.THROTTLE", key, burst, 1, 3600)
				if _, err = p.Exec(ctx); err == nil {
					v, err = cmd.Int64Slice()
				}
			} else {
				v, err = c.Do(ctx, "CL.THROTTLE", key, burst, 1, 3600).Int64Slice()
			}
			if err != nil || len(v) != 5 {
				t.Fatalf("key %s call %d: %v, %v", key, h, v, err)
			}
			if v[0] == 0 {
				admitted++
				if want := int64(burst - admitted + 1); v[2] != want {
					t.Errorf("key %s call %d: remaining %d, want %d", key, h, v[2], want)
				}
			}
		}
		if admitted != burst+1 {
			t.Errorf("key %s: admitted %d of %d across three nodes, want exactly %d", key, admitted, calls, burst+1)
		}
	}
}

// TestRESPTLS: with the client TLS flags the Redis listener speaks TLS;
// plaintext and a client that does not trust the CA are refused, logged
// and counted under listener="resp".
func TestRESPTLS(t *testing.T) {
	t.Parallel()
	p := newPKI(t, "resp-tls")
	other := newPKI(t, "resp-other")
	s := serve(t, "--tls-cert-file", p.server.Cert, "--tls-key-file", p.server.Key, "--resp-addr", "127.0.0.1:0")
	ctx := context.Background()
	good := redisClient(t, s.resp, func(o *redis.Options) { o.TLSConfig = p.client(t, nil) })
	if v, err := good.Do(ctx, "CL.THROTTLE", "k", 1, 1, 1).Int64Slice(); err != nil || len(v) != 5 || v[0] != 0 {
		t.Fatalf("CL.THROTTLE over TLS = %v, %v", v, err)
	}
	plain := redisClient(t, s.resp, func(o *redis.Options) { o.ReadTimeout = 3 * time.Second })
	if err := plain.Ping(ctx).Err(); err == nil {
		t.Error("plaintext PING on the TLS listener answered")
	}
	foreign := redisClient(t, s.resp, func(o *redis.Options) { o.TLSConfig = other.client(t, nil) })
	if err := foreign.Ping(ctx).Err(); err == nil {
		t.Error("a client trusting another CA was answered")
	}
	hc := httpsClient(p.client(t, nil))
	url := "https://" + s.http
	for _, reason := range []string{"plaintext", "bad_certificate"} {
		labels := []string{`listener="resp"`, `reason="` + reason + `"`}
		poll.Until(t, 5*time.Second, func() bool { return metric(hc, url, "shardlimiter_tls_refused_total", labels...) >= 1 },
			"shardlimiter_tls_refused_total{%s} counts the refusal", strings.Join(labels, ","))
	}
	if !strings.Contains(s.stderr.String(), "listener=resp") {
		t.Errorf("no resp refusal in the log:\n%s", s.stderr)
	}
}

// TestRESPSLCheckRuleByName: SL.CHECK without limit and duration takes the
// rules file's rule of that name, and reports its limit.
func TestRESPSLCheckRuleByName(t *testing.T) {
	t.Parallel()
	rules := filepath.Join(t.TempDir(), "rules.yaml")
	writeFile(t, rules, `
domain: shop
descriptors:
  - key: tenant
    rate_limit: {name: per_tenant, unit: minute, requests_per_unit: 2}
`)
	s := serve(t, "--config", rules, "--resp-addr", "127.0.0.1:0")
	c := redisClient(t, s.resp, nil)
	ctx := context.Background()
	for i, want := range [][2]int64{{0, 1}, {0, 0}, {1, 0}} { // over, remaining
		v, err := c.Do(ctx, "SL.CHECK", "per_tenant", "acme").Int64Slice()
		if err != nil || len(v) != 6 || v[0] != want[0] || v[1] != 2 || v[2] != want[1] {
			t.Fatalf("call %d: SL.CHECK per_tenant acme = %v, %v; want over %d, limit 2, remaining %d", i, v, err, want[0], want[1])
		}
	}
}
