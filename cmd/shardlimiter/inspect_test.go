package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
)

func getJSON(t *testing.T, u string) (int, map[string]any) {
	t.Helper()
	resp, err := http.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatalf("GET %s: body is not JSON: %v", u, err)
	}
	return resp.StatusCode, out
}

// TestInspectionEndpoints: GET /v1/keys, the gRPC Inspect service (through
// the CLI) and POST /v1/config/match read without counting: a key
// inspected any number of times still admits its whole allowance.
func TestInspectionEndpoints(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	rulesFile := filepath.Join(dir, "rules.yaml")
	writeFile(t, rulesFile, `
domain: shop
descriptors:
  - key: tenant
    rate_limit: {name: per_tenant, unit: minute, requests_per_unit: 4}
`)
	s := serve(t, "--config", rulesFile)
	keys := "http://" + s.http + "/v1/keys?"
	q := url.Values{"name": {"api"}, "key": {"account:1"}, "limit": {"5"}, "duration_ms": {"60000"}, "algorithm": {"FIXED_WINDOW"}}
	code, out := getJSON(t, keys+q.Encode())
	st, _ := out["owner_state"].(map[string]any)
	if code != http.StatusOK || st["held"] != false || st["remaining"] != "5" || out["owner"] == "" {
		t.Fatalf("GET /v1/keys (fresh) = %d %v, want not held, 5 left", code, out)
	}
	if code, out := postJSON(t, "http://"+s.http+"/v1/GetRateLimits",
		`{"requests":[{"name":"api","unique_key":"account:1","hits":2,"limit":5,"duration_ms":60000,"algorithm":"FIXED_WINDOW"}]}`); code != http.StatusOK {
		t.Fatalf("check: %d %v", code, out)
	}
	for range 3 {
		code, out = getJSON(t, keys+q.Encode())
	}
	st, _ = out["owner_state"].(map[string]any)
	if code != http.StatusOK || st["held"] != true || st["remaining"] != "3" || st["current_count"] != "2" || st["status"] != "UNDER_LIMIT" {
		t.Fatalf("GET /v1/keys (after 2 hits) = %d %v, want held, 3 left, 2 counted", code, out)
	}

	cli := func(args ...string) (int, string) {
		var o, e bytes.Buffer
		code := run(context.Background(), args, env(), &o, &e)
		return code, o.String() + e.String()
	}
	if code, text := cli("inspect", "key", "--server", s.grpc, "--name", "api", "--key", "account:1", "--limit", "5", "--duration", "1m", "--algorithm", "FIXED_WINDOW"); code != exitOK ||
		!strings.Contains(text, "3 of 5 left") || !strings.Contains(text, "2 in this window") {
		t.Errorf("inspect key: exit %d\n%s", code, text)
	}
	// Nothing was spent by the inspections: the 3 left are admitted.
	if code, out := postJSON(t, "http://"+s.http+"/v1/GetRateLimits",
		`{"requests":[{"name":"api","unique_key":"account:1","hits":3,"limit":5,"duration_ms":60000,"algorithm":"FIXED_WINDOW"}]}`); code != http.StatusOK ||
		out["responses"].([]any)[0].(map[string]any)["status"] != "UNDER_LIMIT" {
		t.Errorf("the 3 hits left after inspections: %d %v, want UNDER_LIMIT", code, out)
	}

	// A rule of the rules file, by name: its limit is reported.
	if code, text := cli("inspect", "key", "--server", s.grpc, "--name", "per_tenant", "--key", "k"); code != exitOK || !strings.Contains(text, "4 of 4 left") {
		t.Errorf("inspect key of a rules-file rule: exit %d\n%s", code, text)
	}
	if code, out := getJSON(t, keys+"name=nosuchrule&key=k"); code != http.StatusBadRequest || out["error"] == nil {
		t.Errorf("GET /v1/keys of an unknown rule = %d %v, want 400", code, out)
	}
	for _, bad := range []string{"name=api", "name=api&key=k&limit=x", "name=api&key=k&limit=5&duration_ms=1000&algorithm=MAGIC", "name=api&key=k&bogus=1"} {
		if code, out := getJSON(t, keys+bad); code != http.StatusBadRequest || out["error"] == nil {
			t.Errorf("GET /v1/keys?%s = %d %v, want 400 with an error", bad, code, out)
		}
	}

	code, text := cli("inspect", "match", "--http", "http://"+s.http, "--domain", "shop", "--descriptor", "tenant=acme", "--descriptor", "other=x")
	if code != exitOK || !strings.Contains(text, "per_tenant: 4 per minute") || !strings.Contains(text, "no rule") ||
		!strings.Contains(text, `shardlimiter inspect key -server http://`+s.http+` -name per_tenant -key`) {
		t.Errorf("inspect match: exit %d\n%s", code, text)
	}
	if code, text := cli("inspect", "match", "--http", "http://"+s.http, "--domain", "shop"); code != exitUsage {
		t.Errorf("inspect match without descriptors: exit %d\n%s", code, text)
	}
	if code, _ := cli("inspect"); code != exitUsage {
		t.Errorf("inspect without a subcommand: exit %d", code)
	}
}
