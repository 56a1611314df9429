package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	ratelimitpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/shardlimiter/shardlimiter/internal/poll"
	"github.com/shardlimiter/shardlimiter/transport"
)

// TestRLSShed: with --max-inflight 1, concurrent ShouldRateLimit calls of
// four descriptors share the client bound with the native API: the calls
// that do not fit are refused with RESOURCE_EXHAUSTED and a retry delay
// (RetryInfo), POST /json with 429 and Retry-After; nothing else fails.
func TestRLSShed(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a real process")
	}
	t.Parallel()
	rulesFile := filepath.Join(t.TempDir(), "rules.yaml")
	writeFile(t, rulesFile, "domain: rl\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 1000000000}\n")
	p := startRLSNode(t, "127.0.0.45", rulesFile, "--max-inflight", "1")
	c := rlsClient(t, p)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var grpcShed, httpShed, answered atomic.Int64
	var wg sync.WaitGroup
	for i := range 16 {
		req := &rlspb.RateLimitRequest{Domain: "rl", Descriptors: []*ratelimitpb.RateLimitDescriptor{
			desc("k", fmt.Sprint(i, "a")), desc("k", fmt.Sprint(i, "b")), desc("k", fmt.Sprint(i, "c")), desc("k", fmt.Sprint(i, "d"))}}
		wg.Go(func() {
			for ctx.Err() == nil {
				_, err := c.ShouldRateLimit(ctx, req)
				switch {
				case err == nil:
					answered.Add(1)
				case transport.IsShed(err):
					grpcShed.Add(1)
				case ctx.Err() == nil:
					t.Errorf("ShouldRateLimit = %v, want an answer or a shed with a retry delay", err)
					return
				}
			}
		})
		body := fmt.Sprintf(`{"domain":"rl","descriptors":[{"entries":[{"key":"k","value":"h%d"}]},{"entries":[{"key":"k","value":"i%d"}]}]}`, i, i)
		wg.Go(func() {
			for ctx.Err() == nil {
				code, retry, err := postRLSJSON(ctx, "http://"+p.http+"/json", body)
				switch {
				case err != nil:
					if ctx.Err() == nil {
						t.Errorf("POST /json: %v", err)
					}
					return
				case code == http.StatusOK:
					answered.Add(1)
				case code == http.StatusTooManyRequests && retry != "":
					httpShed.Add(1)
				default:
					t.Errorf("POST /json = %d (Retry-After %q), want 200 or 429 with Retry-After", code, retry)
					return
				}
			}
		})
	}
	poll.Until(t, 20*time.Second, func() bool {
		return grpcShed.Load() > 0 && httpShed.Load() > 0 && answered.Load() > 0
	}, "gRPC and HTTP calls shed and others answered")
	cancel()
	wg.Wait()
	t.Logf("answered %d, shed %d gRPC and %d HTTP", answered.Load(), grpcShed.Load(), httpShed.Load())
}

// postRLSJSON posts body and returns the status and Retry-After.
func postRLSJSON(ctx context.Context, url, body string) (int, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader([]byte(body)))
	if err != nil {
		return 0, "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	if resp.StatusCode == http.StatusTooManyRequests && resp.Header.Get("Retry-After") != "" && !strings.Contains(string(out), "retry_after_ms") {
		return resp.StatusCode, "", nil // a shed answers its delay in the body too
	}
	return resp.StatusCode, resp.Header.Get("Retry-After"), nil
}
