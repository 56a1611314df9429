package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/shardlimiter/shardlimiter/limit"
)

// TestGubernatorAPIAgainstLocalNode drives a node through gubernator's
// API: with 10 keys of 50 per hour hit for a second, exactly 500 checks are
// admitted under either of gubernator's algorithms, and the rest refused.
func TestGubernatorAPIAgainstLocalNode(t *testing.T) {
	t.Parallel()
	for _, alg := range []string{"TOKEN_BUCKET", "LEAKY_BUCKET"} {
		r := runJSON(t, "--local", "1", "--server-bin", serverBin(t), "--api", "gubernator", "--algorithm", alg,
			"--limit", "50", "--period", "1h", "--keys", "10", "--dist", "uniform",
			"--duration", "1s", "--concurrency", "2", "--batch", "10")
		if len(r.Errors) != 0 {
			t.Errorf("%s: errors %v, want none", alg, r.Errors)
		}
		if r.Admitted != 500 || r.Rejected == 0 || r.Checks != r.Admitted+r.Rejected {
			t.Errorf("%s: admitted %d, rejected %d of %d checks; want exactly 10 keys × 50 admitted, the rest rejected", alg, r.Admitted, r.Rejected, r.Checks)
		}
	}
}

func TestGubernatorAPIRefusesWhatItCannotSay(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"--api", "gubernator", "--algorithm", "FIXED_WINDOW"},
		{"--api", "gubernator", "--period", "1500us"},
		{"--api", "gubernator", "--mode", "accuracy"},
		{"--api", "gubernator", "--client", "direct"},
	} {
		var stdout, stderr bytes.Buffer
		args = append(args, "--targets", "127.0.0.1:1")
		if code := run(context.Background(), args, &stdout, &stderr); code == exitOK || !strings.Contains(stderr.String(), "--api") {
			t.Errorf("loadtest %s: exit %d, stderr %q; want a refusal naming --api", strings.Join(args, " "), code, stderr.String())
		}
	}
	req := gubRequest(limit.Check{Name: "n", Key: "k", Hits: 2, Rule: limit.Rule{Algorithm: limit.LeakyBucket, Limit: 7, Period: 3 * time.Second, Burst: 9}})
	if req.Algorithm.String() != "LEAKY_BUCKET" || req.Duration != 3000 || req.Limit != 7 || req.Burst != 9 || req.Hits != 2 || req.UniqueKey != "k" {
		t.Errorf("gubRequest = %v", req)
	}
}
