package dial

import (
	"context"
	"errors"
	"testing"

	"google.golang.org/grpc"

	"github.com/shardlimiter/shardlimiter/limit"
	"github.com/shardlimiter/shardlimiter/transport"
)

// A node link forwards to the peer's Peers service, as itself or as a
// stand-in (the receiver sees the mark), and fails every call once closed.
func TestNodeLink(t *testing.T) {
	t.Parallel()
	seen := make(chan bool, 2)
	local := transport.CheckerFunc(func(ctx context.Context, checks []limit.Check) ([]limit.Result, error) {
		seen <- transport.IsStandin(ctx)
		return (&fakeChecker{Owner: "b"}).Check(ctx, checks)
	})
	_, target, dialer := startGRPC(t, testConfig{Local: local})
	l, err := NewNodeLink("a", target, PeerConfig{DialOptions: []grpc.DialOption{dialer}})
	if err != nil {
		t.Fatal(err)
	}
	for _, standin := range []bool{false, true} {
		res, err := l.Forward(ctxTimeout(t), []limit.Check{mkCheck("k", 1)}, standin)
		if err != nil || len(res) != 1 || res[0].Owner != "b" {
			t.Fatalf("Forward(standin %v) = %+v, %v", standin, res, err)
		}
		if got := <-seen; got != standin {
			t.Errorf("Forward(standin %v): the receiver saw standin %v", standin, got)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatalf("Close = %v", err)
	}
	if _, err := l.Forward(ctxTimeout(t), []limit.Check{mkCheck("k", 1)}, true); !errors.Is(err, transport.ErrClosed) {
		t.Errorf("stand-in Forward after Close = %v, want ErrClosed", err)
	}
	if err := l.Push(ctxTimeout(t), limit.Replica, nil, nil); !errors.Is(err, transport.ErrClosed) {
		t.Errorf("Push after Close = %v, want ErrClosed", err)
	}
}
