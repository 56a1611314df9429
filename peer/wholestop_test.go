package peer

import (
	"bytes"
	"log/slog"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shardlimiter/shardlimiter/internal/poll"
	"github.com/shardlimiter/shardlimiter/limit"
)

// lockedBuffer is a log destination shared by the nodes of a test.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestWholeClusterLeaves: every node of a cluster leaves at once. A leaving
// node whose ring falls back to itself alone (every other member has gone)
// takes nothing over: it plans no pull from the others, which are leaving
// too; and the last to finish says once that no member is left to take the
// keys, instead of claiming a handoff.
func TestWholeClusterLeaves(t *testing.T) {
	t.Parallel()
	logs := &lockedBuffer{}
	c := newTestCluster(t, 3, Config{Logger: slog.New(slog.NewTextHandler(logs, nil))})
	nodes := c.running()
	if got := c.spend(nodes[0], testKeys(30), rule(limit.FixedWindow, 10, time.Hour), 2); got != 60 {
		t.Fatalf("before the stop: %d admitted, want 60", got)
	}
	before := len(logs.String())

	var wg sync.WaitGroup
	for _, tn := range nodes {
		wg.Go(func() {
			if err := tn.node.Leave(); err != nil {
				t.Errorf("Leave(%s): %v", tn.name, err)
			}
		})
	}
	wg.Wait()
	c.signal()
	poll.Until(t, 5*time.Second, func() bool {
		for _, tn := range nodes {
			if v := tn.node.view.Load(); v.snap.Len() != 1 || v.self != 0 || !tn.node.handoffIdle() {
				return false
			}
		}
		return true
	}, "every leaving node's ring holds itself alone, and no transfer is under way")

	after := logs.String()[before:]
	// A node whose Leave has not begun yet (the three run concurrently)
	// may still take over a partition of one that left: only the plans of
	// leaving nodes count.
	planned := regexp.MustCompile(`msg="handoff planned".* pulls=([0-9]+) .*leaving=true`)
	plans := planned.FindAllStringSubmatch(after, -1)
	if len(plans) == 0 {
		t.Errorf("no leaving node planned a handoff:\n%s", after)
	}
	for _, m := range plans {
		if m[1] != "0" {
			t.Errorf("a leaving node planned pulls: %s", m[0])
		}
	}
	for _, bad := range []string{"pull failed", "state did not arrive"} {
		if strings.Contains(after, bad) {
			t.Errorf("logged %q after the stop:\n%s", bad, after)
		}
	}
	if n := strings.Count(after, "no other member left to take the keys"); n < 1 || n > len(nodes) {
		t.Errorf("%d lines say no other member is left, want 1 to %d (once per node at most):\n%s", n, len(nodes), after)
	}
}
