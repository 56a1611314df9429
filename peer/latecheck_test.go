package peer

import (
	"context"
	"testing"
	"time"

	"github.com/shardlimiter/shardlimiter/limit"
	"github.com/shardlimiter/shardlimiter/transport"
)

// TestLateForwardIsNotDecided: a forwarded batch whose sender's deadline
// has passed before the owner gets to it (a CPU-starved owner) is not
// decided: the sender timed out and decided it by its stand-in or fail
// policy, and a hit counted here as well would be counted twice. Stand-in
// batches are dropped likewise.
func TestLateForwardIsNotDecided(t *testing.T) {
	t.Parallel()
	for _, standin := range []bool{false, true} {
		n, err := New(Config{Name: "a"})
		if err != nil {
			t.Fatal(err)
		}
		check := limit.Check{Name: "r", Key: "account:1", Hits: 1, Rule: rule(limit.FixedWindow, 3, time.Hour)}
		ctx, cancel := context.WithTimeout(context.Background(), -time.Second)
		cancel()
		if standin {
			ctx = transport.WithStandin(ctx)
		}
		res, err := n.CheckLocal(ctx, []limit.Check{check})
		if err != nil {
			t.Fatal(err)
		}
		if res[0].Reason != limit.Unavailable || res[0].Allowed {
			t.Errorf("standin=%v: late batch answered %+v, want unavailable", standin, res[0])
		}
		res, err = n.CheckLocal(context.Background(), []limit.Check{check})
		if err != nil {
			t.Fatal(err)
		}
		if !res[0].Allowed || res[0].Remaining != 2 {
			t.Errorf("standin=%v: first check on time = %+v, want admitted with 2 left (the late one counted nothing)", standin, res[0])
		}
	}
}
