package inspect

import (
	"testing"

	"go.uber.org/goleak"
	"google.golang.org/grpc"

	"github.com/shardlimiter/shardlimiter/transport/dial"
	"github.com/shardlimiter/shardlimiter/transport/server"
	"github.com/shardlimiter/shardlimiter/transport/transporttest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

const resetAt = transporttest.ResetAt

// startGRPC serves in on a client listener over bufconn for the test's
// lifetime and returns a dial target and option that reach it.
func startGRPC(t testing.TB, in Inspector) (*server.Listener, string, grpc.DialOption) {
	t.Helper()
	l := server.NewClientListener(server.Config{})
	Register(l, in)
	target, opt := transporttest.Bufconn(t, l)
	return l, target, opt
}

// dialClient returns a Client of the server, closed at the end of the test.
func dialClient(t testing.TB, target string, opts ...grpc.DialOption) *dial.Client {
	t.Helper()
	c, err := dial.Dial(target, opts...)
	if err != nil {
		t.Fatalf("Dial(%q) = %v", target, err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}
