package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	ratelimitpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/shardlimiter/shardlimiter/internal/poll"
)

func reloadRules(limit int) string {
	return fmt.Sprintf("domain: rl\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: %d, algorithm: sliding_log}\n", limit)
}

// TestRLSHotReload: a changed rules file applies within 2 s; a broken one
// is refused (log line, metric), the last good rules stay and the node
// stays ready.
func TestRLSHotReload(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a real process")
	}
	t.Parallel()
	rulesFile := filepath.Join(t.TempDir(), "rules.yaml")
	writeFile(t, rulesFile, reloadRules(5))
	p := startRLSNode(t, "127.0.0.41", rulesFile)
	c := rlsClient(t, p)
	limitOf := func(value string) uint32 {
		resp, err := c.ShouldRateLimit(context.Background(), &rlspb.RateLimitRequest{Domain: "rl",
			Descriptors: []*ratelimitpb.RateLimitDescriptor{desc("k", value)}})
		if err != nil {
			t.Fatalf("ShouldRateLimit: %v", err)
		}
		return resp.Statuses[0].CurrentLimit.GetRequestsPerUnit()
	}
	if got := limitOf("a"); got != 5 {
		t.Fatalf("limit = %d, want 5", got)
	}
	writeFile(t, rulesFile, reloadRules(7))
	took := poll.Until(t, 2*time.Second, func() bool { return limitOf("b") == 7 }, "the new limit in force")
	t.Logf("new rules in force after %v", took)

	writeFile(t, rulesFile, "domain: rl\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n")
	url := "http://" + p.http
	poll.Until(t, 2*time.Second, func() bool {
		return metric(http.DefaultClient, url, "shardlimiter_rules_reload_errors_total") >= 1
	}, "the broken file refused")
	if got := limitOf("c"); got != 7 {
		t.Errorf("limit after a broken file = %d, want the last good 7", got)
	}
	if resp, err := http.Get(url + "/readyz"); err != nil || resp.StatusCode != http.StatusOK {
		t.Errorf("readyz after a refused reload: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}
}

// TestRLSClusterExact runs three binaries on 127.0.0.42-44 and sends every
// request to one node: each descriptor's counter lives on one owner, so
// every descriptor is admitted exactly its limit, and the owners spread.
func TestRLSClusterExact(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real processes")
	}
	t.Parallel()
	rulesFile := filepath.Join(t.TempDir(), "rules.yaml")
	writeFile(t, rulesFile, reloadRules(4)+"  - key: tiered\n    rate_limits:\n      - {unit: minute, requests_per_unit: 3, algorithm: sliding_log}\n      - {unit: hour, requests_per_unit: 10, algorithm: sliding_log}\n")
	bin := buildBinary(t)
	hosts := []string{"127.0.0.42", "127.0.0.43", "127.0.0.44"}
	port := freeGossipPort(t, hosts...)
	seed := net.JoinHostPort(hosts[0], strconv.Itoa(port))
	var procs []*proc
	for _, h := range hosts {
		procs = append(procs, startProc(t, bin, h, port, seed, "--config", rulesFile))
	}
	converge(t, procs...)
	c := rlsClient(t, procs[0])
	ctx := context.Background()
	const keys = 30
	for k := range keys {
		// Two descriptors per request: a plain limit of 4 and a group of
		// 3/min + 10/h, both counted on their owners.
		req := &rlspb.RateLimitRequest{Domain: "rl", Descriptors: []*ratelimitpb.RateLimitDescriptor{
			desc("k", fmt.Sprint("v", k)), desc("tiered", fmt.Sprint("v", k))}}
		admitted := [2]int{}
		for range 6 {
			resp, err := c.ShouldRateLimit(ctx, req)
			if err != nil {
				t.Fatalf("key %d: %v", k, err)
			}
			for i, s := range resp.Statuses {
				if s.Code == rlspb.RateLimitResponse_OK {
					admitted[i]++
				}
			}
		}
		if admitted != [2]int{4, 3} {
			t.Errorf("key %d: admitted %v, want [4 3]", k, admitted)
		}
	}
	// Every node decided some of them: the forwarded checks were counted
	// on their owners (the first node would otherwise hold all the keys).
	for _, p := range procs {
		if n := metric(http.DefaultClient, "http://"+p.http, "shardlimiter_table_keys"); n <= 0 {
			t.Errorf("%s holds %v keys, want some: checks must be counted on their owners", p.name, n)
		}
	}
}
