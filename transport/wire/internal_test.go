package wire

import (
	"strings"
	"testing"
	"time"

	"github.com/shardlimiter/shardlimiter/limit"
)

// A gubernator check crosses between nodes whole (created_at, duration 0,
// negative hits, its flags) and a client's batch refuses it.
func TestInternalChecks(t *testing.T) {
	t.Parallel()
	c := limit.Check{Name: "n", Key: "k", Hits: -3, Rule: limit.Rule{Algorithm: limit.GubernatorLeakyBucket, Limit: 10,
		Behavior: limit.DrainOverLimit | limit.Reset, CreatedAt: 1_700_000_000_123}}
	g := limit.Check{Name: "n", Key: "g", Hits: 1, Rule: limit.Rule{Algorithm: limit.GubernatorTokenBucket, Limit: 60,
		Period: limit.GregorianHours * time.Millisecond, Behavior: limit.Gregorian}}
	data, err := AppendChecks(nil, []limit.Check{c, g}, nil)
	if err != nil {
		t.Fatal(err)
	}
	peer := Checks{Internal: true}
	if _, err := DecodeChecks(data, 10, &peer); err != nil || len(peer.Failed) != 0 {
		t.Fatalf("DecodeChecks(internal) = %v, failed %+v", err, peer.Failed)
	}
	if peer.Checks[0] != c || peer.Checks[1] != g {
		t.Errorf("DecodeChecks(internal) = %+v, want %+v", peer.Checks, []limit.Check{c, g})
	}
	var client Checks
	if _, err := DecodeChecks(data, 10, &client); err != nil || len(client.Failed) != 2 {
		t.Fatalf("DecodeChecks(client) = %v, failed %+v: want both refused", err, client.Failed)
	}
	if msg := client.Failed[0].Err.Error(); !strings.Contains(msg, "unknown algorithm 6") {
		t.Errorf("client refusal = %q", msg)
	}
	r := RequestOf(&limit.Check{Name: "n", Key: "k", Rule: limit.Rule{Algorithm: limit.TokenBucket, Limit: 1, Period: time.Second, CreatedAt: 5}})
	if _, err := r.Check(); err == nil || !strings.Contains(err.Error(), "created_at_ms") {
		t.Errorf("Check(created_at on the client API) = %v", err)
	}
}
