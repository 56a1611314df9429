package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	ratelimitpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/shardlimiter/shardlimiter/internal/poll"
)

// The tests of this file are envoyproxy/ratelimit's own expectations (its
// integration-test/scripts, run behind Envoy there, and the basic-config
// sequence of its test/integration), replayed step by step against the
// binary with the descriptor lists Envoy sends for them. The rules are
// the reference's example and integration configuration, as written
// there. The reference's minute-long windows are kept: a sequence starts
// once the current minute has room for it (awayFromWindowEnd). The steps
// that wait a whole minute for a window to turn are left out; window
// turns are tested in package window.

// refExampleRules is the reference's example configuration (the domain
// its integration-test scripts run against).
const refExampleRules = `
domain: rl
descriptors:
  - key: category
    value: account
    rate_limit:
      replaces:
        - name: bkthomps
        - name: fake_name
      unit: minute
      requests_per_unit: 4
  - key: source_cluster
    value: proxy
    descriptors:
      - key: destination_cluster
        value: bkthomps
        rate_limit:
          replaces:
            - name: bkthomps
          unit: minute
          requests_per_unit: 2
      - key: destination_cluster
        value: mock
        rate_limit:
          unit: minute
          requests_per_unit: 1
      - key: destination_cluster
        value: override
        rate_limit:
          replaces:
            - name: banned_limit
          unit: minute
          requests_per_unit: 2
      - key: destination_cluster
        value: fake
        rate_limit:
          name: fake_name
          unit: minute
          requests_per_unit: 2
  - key: foo
    rate_limit:
      unit: minute
      requests_per_unit: 2
    descriptors:
      - key: bar
        rate_limit:
          unit: minute
          requests_per_unit: 3
      - key: bar
        value: bkthomps
        rate_limit:
          name: bkthomps
          unit: minute
          requests_per_unit: 1
      - key: bar
        value: banned
        rate_limit:
          name: banned_limit
          unit: minute
          requests_per_unit: 0
  - key: service
    value: service_1
    quota_mode: true
    rate_limit:
      unit: minute
      requests_per_unit: 1
    metadata:
      service_with_quota:
        name: "service_1"
  - key: service
    value: service_2
    quota_mode: true
    rate_limit:
      unit: minute
      requests_per_unit: 2
    metadata:
      service_with_quota:
        name: "service_2"
`

// refBasicRules are the reference's test/integration basic and another
// domains.
const refBasicRules = `
domain: basic
descriptors:
  - key: key1
    rate_limit:
      unit: second
      requests_per_unit: 50
---
domain: another
descriptors:
  - key: key2
    rate_limit:
      unit: minute
      requests_per_unit: 20
  - key: key3
    rate_limit:
      unit: hour
      requests_per_unit: 10
  - key: key4
    rate_limit:
      unit: day
      requests_per_unit: 20
`

// awayFromWindowEnd waits until the current window of length w (aligned
// to the epoch, as the rules' windows are) has at least room left.
func awayFromWindowEnd(t *testing.T, w, room time.Duration) {
	t.Helper()
	poll.Until(t, room+time.Second, func() bool {
		return w-time.Duration(time.Now().UnixNano()%int64(w)) >= room
	}, "%v left in the current %v window", room, w)
}

// entriesOf builds a descriptor with an optional hits_addend (nil: none).
func entriesOf(hits *wrapperspb.UInt64Value, kv ...string) *ratelimitpb.RateLimitDescriptor {
	d := desc(kv...)
	d.HitsAddend = hits
	return d
}

// shouldRateLimit calls c as Envoy does and fails t on an error.
func shouldRateLimit(t *testing.T, c rlspb.RateLimitServiceClient, domain string, descs ...*ratelimitpb.RateLimitDescriptor) *rlspb.RateLimitResponse {
	t.Helper()
	resp, err := c.ShouldRateLimit(context.Background(), &rlspb.RateLimitRequest{Domain: domain, Descriptors: descs})
	if err != nil {
		t.Fatalf("ShouldRateLimit(%s, %v) = %v", domain, descs, err)
	}
	return resp
}

// TestRLSReferenceScripts replays integration-test/scripts: token-quota.sh,
// multiservice-tokenquota.sh and replaces.sh, each on a node of its own.
func TestRLSReferenceScripts(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real processes")
	}
	t.Parallel()
	rulesFile := filepath.Join(t.TempDir(), "example.yaml")
	writeFile(t, rulesFile, refExampleRules)
	zero, one := wrapperspb.UInt64(0), wrapperspb.UInt64(1)

	// token-quota.sh: a request checks service_2 with hits_addend 0, its
	// response reports 1 (apply_on_stream_done). 2 per minute: requests
	// 1–3 are served (the third finds the counter exactly at its limit),
	// the fourth is refused.
	t.Run("token-quota.sh", func(t *testing.T) {
		t.Parallel()
		c := rlsClient(t, startRLSNode(t, "127.0.0.160", rulesFile))
		awayFromWindowEnd(t, time.Minute, 10*time.Second)
		for i, served := range []bool{true, true, true, false} {
			resp := shouldRateLimit(t, c, "rl", entriesOf(zero, "service", "service_2"))
			if got := resp.OverallCode == ok; got != served {
				t.Fatalf("request-no %d: request path %v, want served %v", i+1, resp, served)
			}
			if served {
				shouldRateLimit(t, c, "rl", entriesOf(one, "service", "service_2")) // the response path
			}
		}
	})

	// multiservice-tokenquota.sh: the request path checks both services
	// with hits_addend 0; Envoy routes to the service named in the dynamic
	// metadata (the first that passed); the response path reports 1 to the
	// service that served. service_1 has 1 per minute, service_2 2: two
	// requests reach service_1, three service_2, the sixth is refused.
	t.Run("multiservice-tokenquota.sh", func(t *testing.T) {
		t.Parallel()
		c := rlsClient(t, startRLSNode(t, "127.0.0.161", rulesFile, "--rls-dynamic-metadata"))
		awayFromWindowEnd(t, time.Minute, 10*time.Second)
		for i, want := range []string{"service_1", "service_1", "service_2", "service_2", "service_2", ""} {
			resp := shouldRateLimit(t, c, "rl", entriesOf(zero, "service", "service_1"), entriesOf(zero, "service", "service_2"))
			if want == "" {
				if resp.OverallCode != over {
					t.Fatalf("request-no %d = %v, want OVER_LIMIT (every quota spent)", i+1, resp)
				}
				continue
			}
			name := resp.GetDynamicMetadata().GetFields()["metadata"].GetStructValue().GetFields()["service_with_quota"].GetStructValue().GetFields()["name"].GetStringValue()
			if resp.OverallCode != ok || name != want {
				t.Fatalf("request-no %d = %v, routed to %q; want OK and %q", i+1, resp, name, want)
			}
			shouldRateLimit(t, c, "rl", entriesOf(one, "service", name))
		}
	})

	// replaces.sh, with the descriptors Envoy builds for its routes
	// /twoheader, /fourheader and /fiveheader from the request headers.
	t.Run("replaces.sh", func(t *testing.T) {
		t.Parallel()
		c := rlsClient(t, startRLSNode(t, "127.0.0.162", rulesFile))
		awayFromWindowEnd(t, time.Minute, 10*time.Second)
		fb := func(foo, bar string) *ratelimitpb.RateLimitDescriptor { return desc("foo", foo, "bar", bar) }
		sd := func(dst string) *ratelimitpb.RateLimitDescriptor {
			return desc("source_cluster", "proxy", "destination_cluster", dst)
		}
		account := desc("category", "account")
		steps := []struct {
			descs  []*ratelimitpb.RateLimitDescriptor
			served bool
		}{
			// replaces raises a banned limit.
			{[]*ratelimitpb.RateLimitDescriptor{fb("bkthomps", "banned")}, false},
			{[]*ratelimitpb.RateLimitDescriptor{fb("bkthomps", "banned"), sd("mock")}, false},
			{[]*ratelimitpb.RateLimitDescriptor{fb("bkthomps", "banned"), sd("override")}, true},
			{[]*ratelimitpb.RateLimitDescriptor{fb("bkthomps", "banned"), sd("override")}, true},
			{[]*ratelimitpb.RateLimitDescriptor{fb("bkthomps", "banned"), sd("override")}, false},
			// replaces does not touch the replaced limit's own counter.
			{[]*ratelimitpb.RateLimitDescriptor{fb("my_foo", "bkthomps"), sd("bkthomps")}, true},
			{[]*ratelimitpb.RateLimitDescriptor{fb("my_foo", "bkthomps"), sd("bkthomps")}, true},
			{[]*ratelimitpb.RateLimitDescriptor{fb("my_foo", "bkthomps"), sd("bkthomps")}, false},
			{[]*ratelimitpb.RateLimitDescriptor{fb("my_foo", "bkthomps"), sd("not_bkthomps")}, true},
			{[]*ratelimitpb.RateLimitDescriptor{fb("my_foo", "bkthomps"), sd("not_bkthomps")}, false},
			{[]*ratelimitpb.RateLimitDescriptor{fb("my_foo", "bkthomps"), sd("bkthomps")}, false},
			// one rule replaces several.
			{[]*ratelimitpb.RateLimitDescriptor{fb("my_foo", "bkthomps"), sd("fake"), account}, true},
			{[]*ratelimitpb.RateLimitDescriptor{fb("my_foo", "bkthomps"), sd("fake"), account}, true},
			{[]*ratelimitpb.RateLimitDescriptor{fb("my_foo", "bkthomps"), sd("fake"), account}, true},
			{[]*ratelimitpb.RateLimitDescriptor{fb("my_foo", "bkthomps"), sd("fake"), account}, true},
			{[]*ratelimitpb.RateLimitDescriptor{fb("my_foo", "bkthomps"), sd("fake"), account}, false},
			{[]*ratelimitpb.RateLimitDescriptor{fb("foo_2", "bkthomps")}, true},
			{[]*ratelimitpb.RateLimitDescriptor{fb("foo_2", "bkthomps")}, false},
			{[]*ratelimitpb.RateLimitDescriptor{fb("foo_3", "bar_3"), sd("fake")}, true},
			{[]*ratelimitpb.RateLimitDescriptor{fb("foo_3", "bar_3"), sd("fake")}, true},
			{[]*ratelimitpb.RateLimitDescriptor{fb("foo_3", "bar_3"), sd("fake")}, false},
			{[]*ratelimitpb.RateLimitDescriptor{fb("my_foo", "bkthomps"), sd("fake"), account}, false},
		}
		for i, s := range steps {
			resp := shouldRateLimit(t, c, "rl", s.descs...)
			if got := resp.OverallCode == ok; got != s.served {
				t.Fatalf("step %d %v = %v, want served %v", i+1, s.descs, resp, s.served)
			}
		}
	})
}

// TestRLSReferenceBasicConfig replays the basic-config sequence of the
// reference's test/integration in both counting modes: by default, and
// with --rls-stop-increment-when-over-limit, where a descriptor that
// stays under its limit counts nothing while another of the request goes
// over.
func TestRLSReferenceBasicConfig(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real processes")
	}
	t.Parallel()
	rulesFile := filepath.Join(t.TempDir(), "basic.yaml")
	writeFile(t, rulesFile, refBasicRules)
	for i, stop := range []bool{false, true} {
		t.Run("stop="+strconv.FormatBool(stop), func(t *testing.T) {
			t.Parallel()
			var extra []string
			if stop {
				extra = append(extra, "--rls-stop-increment-when-over-limit")
			}
			c := rlsClient(t, startRLSNode(t, "127.0.0."+strconv.Itoa(163+i), rulesFile, extra...))
			type want struct {
				code      rlspb.RateLimitResponse_Code
				rpu       uint32
				unit      rlspb.RateLimitResponse_RateLimit_Unit
				remaining uint32
			}
			check := func(step string, st *rlspb.RateLimitResponse_DescriptorStatus, w want) {
				t.Helper()
				l := st.GetCurrentLimit()
				if st.GetCode() != w.code || l.GetRequestsPerUnit() != w.rpu || l.GetUnit() != w.unit || l.GetName() != "" || st.GetLimitRemaining() != w.remaining {
					t.Fatalf("%s: status %v, want %+v and no name", step, st, w)
				}
			}
			// An unknown domain: OK, no limit.
			resp := shouldRateLimit(t, c, "foo", desc("hello", "world"))
			if st := resp.Statuses[0]; resp.OverallCode != ok || st.Code != ok || st.CurrentLimit != nil || st.LimitRemaining != 0 {
				t.Fatalf("unknown domain: %v", resp)
			}
			resp = shouldRateLimit(t, c, "basic", desc("key1", "foo"))
			check("basic key1", resp.Statuses[0], want{ok, 50, rlspb.RateLimitResponse_RateLimit_SECOND, 49})

			awayFromWindowEnd(t, time.Minute, 10*time.Second)
			key := strconv.FormatUint(rand.Uint64(), 10)
			for i := range 25 {
				resp := shouldRateLimit(t, c, "another", desc("key2", key))
				w := want{ok, 20, rlspb.RateLimitResponse_RateLimit_MINUTE, uint32(20 - (i + 1))}
				if i >= 20 {
					w.code, w.remaining = over, 0
				}
				if resp.OverallCode != w.code {
					t.Fatalf("key2 take %d: overall %v, want %v", i, resp.OverallCode, w.code)
				}
				check(fmt.Sprintf("key2 take %d", i), resp.Statuses[0], w)
			}

			// Two keys of one domain in one request: key3 (10 an hour) goes
			// over at the 11th request.
			key = strconv.FormatUint(rand.Uint64(), 10)
			for i := range 15 {
				resp := shouldRateLimit(t, c, "another", desc("key2", key), desc("key3", key))
				w2 := want{ok, 20, rlspb.RateLimitResponse_RateLimit_MINUTE, uint32(20 - (i + 1))}
				w3 := want{ok, 10, rlspb.RateLimitResponse_RateLimit_HOUR, uint32(10 - (i + 1))}
				overall := ok
				if i >= 10 {
					overall, w3.code, w3.remaining = over, over, 0
					if stop {
						w2.remaining = 10 // key2 stops counting while key3 is over
					}
				}
				if resp.OverallCode != overall {
					t.Fatalf("key2+key3 take %d: overall %v, want %v", i, resp.OverallCode, overall)
				}
				check(fmt.Sprintf("key2+key3 take %d, key2", i), resp.Statuses[0], w2)
				check(fmt.Sprintf("key2+key3 take %d, key3", i), resp.Statuses[1], w3)
			}

			// duration_until_reset counts down.
			first := shouldRateLimit(t, c, "another", desc("key4", "durTest")).Statuses[0].DurationUntilReset.AsDuration()
			second := shouldRateLimit(t, c, "another", desc("key4", "durTest")).Statuses[0].DurationUntilReset.AsDuration()
			if second >= first || first > 24*time.Hour {
				t.Errorf("duration_until_reset %v then %v: want it to fall within the day", first, second)
			}
		})
	}
}

// TestRLSTokenQuotaAcrossNodes: a token quota checked and reported
// through different nodes of 3 is enforced exactly: each check with
// hits_addend 0 is answered as a single counter would answer it, and each
// report counts in full, past the limit.
func TestRLSTokenQuotaAcrossNodes(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real processes")
	}
	t.Parallel()
	rulesFile := filepath.Join(t.TempDir(), "quota.yaml")
	writeFile(t, rulesFile, `
domain: llm
descriptors:
  - key: tenant
    rate_limit: {unit: hour, requests_per_unit: 1000, name: tokens_per_hour}
`)
	bin := buildBinary(t)
	hosts := []string{"127.0.0.166", "127.0.0.167", "127.0.0.168"}
	port := freeGossipPort(t, hosts...)
	seed := hosts[0] + ":" + strconv.Itoa(port)
	var clients []rlspb.RateLimitServiceClient
	var procs []*proc
	for i, h := range hosts {
		join := seed
		if i == 0 {
			join = ""
		}
		p := startProc(t, bin, h, port, join, "--config", rulesFile)
		procs, clients = append(procs, p), append(clients, rlsClient(t, p))
	}
	converge(t, procs...)
	awayFromWindowEnd(t, time.Hour, 30*time.Second)

	zero := wrapperspb.UInt64(0)
	for tenant := range 3 { // several keys, so that each node owns some
		name := "tenant-" + strconv.Itoa(tenant)
		used := int64(0) // the exact count a single counter would hold
		for i := 0; ; i++ {
			c := clients[(i+tenant)%3]
			resp := shouldRateLimit(t, c, "llm", entriesOf(zero, "tenant", name))
			st := resp.Statuses[0]
			wantOK := used <= 1000
			wantRemaining := uint32(max(1000-used, 0))
			if !wantOK {
				wantRemaining = 0
			}
			if (resp.OverallCode == ok) != wantOK || st.LimitRemaining != wantRemaining || st.CurrentLimit.GetName() != "tokens_per_hour" {
				t.Fatalf("%s check %d via node %d with %d used: %v, want OK %v, remaining %d", name, i, (i+tenant)%3, used, resp, wantOK, wantRemaining)
			}
			if !wantOK {
				break
			}
			// The response path reports the tokens used, through another node.
			tokens := uint64(137 + 41*i)
			shouldRateLimit(t, clients[(i+tenant+1)%3], "llm", entriesOf(wrapperspb.UInt64(tokens), "tenant", name))
			used += int64(tokens)
		}
		// Every node now refuses the tenant.
		for n, c := range clients {
			if resp := shouldRateLimit(t, c, "llm", entriesOf(zero, "tenant", name)); resp.OverallCode != over {
				t.Errorf("%s after the quota via node %d: %v, want OVER_LIMIT", name, n, resp)
			}
		}
	}
}

// TestNativeOverdraft: the native API's OVERDRAFT behavior over HTTP/JSON
// (by name) is the RLS path's counting: a report counts in full, a 0-hit
// check at the limit passes and over it is refused.
func TestNativeOverdraft(t *testing.T) {
	t.Parallel()
	s := serve(t)
	item := func(hits int) string {
		return fmt.Sprintf(`{"requests":[{"name":"tokens","unique_key":"tenant-1","hits":%d,"limit":10,"duration_ms":3600000,"algorithm":"FIXED_WINDOW","behavior":"OVERDRAFT"}]}`, hits)
	}
	awayFromWindowEnd(t, time.Hour, 5*time.Second)
	for i, step := range []struct {
		hits      int
		status    string
		remaining string // int64: a string in proto3 JSON
	}{
		{0, "UNDER_LIMIT", "10"},
		{10, "UNDER_LIMIT", "0"},
		{0, "UNDER_LIMIT", "0"}, // at the limit, not over it
		{4, "OVER_LIMIT", "0"},  // counted: 14 of 10
		{0, "OVER_LIMIT", "0"},
		{1, "OVER_LIMIT", "0"},
	} {
		code, out := postJSON(t, "http://"+s.http+"/v1/GetRateLimits", item(step.hits))
		resps, _ := out["responses"].([]any)
		if code != 200 || len(resps) != 1 {
			t.Fatalf("step %d: %d %v", i, code, out)
		}
		r := resps[0].(map[string]any)
		if r["status"] != step.status || fmt.Sprint(r["remaining"]) != step.remaining || r["error"] != "" {
			t.Fatalf("step %d (hits %d): %v, want %s with %v remaining", i, step.hits, r, step.status, step.remaining)
		}
	}
}
