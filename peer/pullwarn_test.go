package peer

import (
	"context"
	"log/slog"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shardlimiter/shardlimiter/internal/poll"
	"github.com/shardlimiter/shardlimiter/limit"
	"github.com/shardlimiter/shardlimiter/ring"
)

// TestPullFailingAfterLeaveIsNoWarning: a join's pull that is under way
// when the node begins to leave (a whole cluster stopped right after it
// formed) and then fails is logged at debug, not as a warning: the node
// it pulled from is most likely stopping too. The node's state at the
// failure decides, not at the start (seen: a "pull failed" warning on an
// ordinary stop of every node).
func TestPullFailingAfterLeaveIsNoWarning(t *testing.T) {
	t.Parallel()
	// A peer that accepts connections and never answers.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var accepted atomic.Int32
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			defer c.Close()
		}
	}()
	logs := &lockedBuffer{}
	n, err := New(Config{Name: "a", Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	if err != nil {
		t.Fatal(err)
	}
	defer n.peers.closeAll()
	silent := ring.Member{Name: "b", Addr: l.Addr().String(), PeerAddr: l.Addr().String()}
	if err := n.rebuild([]ring.Member{{Name: "a", Addr: "127.0.0.1:1"}, silent}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		n.mv.runPull(ctx, job{pull: true, peer: silent, parts: []int{0}, why: limit.Join})
	}()
	poll.Until(t, 10*time.Second, func() bool { return accepted.Load() > 0 }, "the pull reaches the silent peer")
	n.leaving.Store(true)
	cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the pull did not end when its context did")
	}
	out := logs.String()
	if !strings.Contains(out, "pull failed") {
		t.Fatalf("the failed pull was not logged at all:\n%s", out)
	}
	for _, line := range strings.Split(out, "\n") {
		if strings.Contains(line, "pull failed") && !strings.Contains(line, "level=DEBUG") {
			t.Errorf("a pull that failed after the node began to leave was logged above debug:\n%s", line)
		}
	}
}
