package main

import (
	"context"
	"strings"
	"testing"

	"github.com/shardlimiter/shardlimiter/limit"
)

// A node started without --config says at the start that its Envoy
// rate-limit service answers OK to everything, and an item that names a
// rule (limit and duration_ms 0) is told there is no rules file, not that
// the rules file lacks the rule.
func TestWithoutConfigSaysSo(t *testing.T) {
	t.Parallel()
	s := serve(t)
	if !strings.Contains(s.stderr.String(), noRulesWarning) {
		t.Errorf("stderr lacks the warning %q:\n%s", noRulesWarning, s.stderr)
	}
	api := dialAPI(t, s.grpc)
	res, err := api.GetRateLimits(context.Background(), []limit.Check{{Name: "user_limit", Key: "k", Hits: 1}})
	if err != nil || len(res) != 1 {
		t.Fatalf("GetRateLimits = %+v, %v", res, err)
	}
	if e := res[0].Error; !strings.Contains(e, "no rules file (--config)") || strings.Contains(e, "in the rules file") {
		t.Errorf("item naming a rule without --config: error %q, want it to say there is no rules file", e)
	}
}
