package peers

import (
	"context"
	"testing"

	"go.uber.org/goleak"
	"google.golang.org/grpc"

	"github.com/shardlimiter/shardlimiter/limit"
	"github.com/shardlimiter/shardlimiter/transport"
	"github.com/shardlimiter/shardlimiter/transport/server"
	"github.com/shardlimiter/shardlimiter/transport/transporttest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

var (
	ctxTimeout = transporttest.Ctx
	dialConn   = transporttest.DialConn
)

type fakeState struct{}

func (fakeState) Push(context.Context, string, limit.Transfer, []int, []limit.KeyState) error {
	return nil
}

func (fakeState) Pull(context.Context, limit.PullRequest) ([]limit.KeyState, error) {
	return nil, nil
}

// testConfig is a peer listener with the services the test names.
type testConfig struct {
	Local    transport.Checker // Peers; nil: a fake
	State    StateService
	InFlight *server.InFlight
}

// startGRPC serves cfg over bufconn for the test's lifetime and returns a
// dial target and option that reach it.
func startGRPC(t testing.TB, cfg testConfig) (*server.Listener, string, grpc.DialOption) {
	t.Helper()
	l := server.NewPeerListener(server.Config{InFlight: cfg.InFlight})
	if cfg.Local == nil {
		cfg.Local = &transporttest.FakeChecker{Owner: "peer"}
	}
	Register(l, cfg.Local, cfg.State)
	target, opt := transporttest.Bufconn(t, l)
	return l, target, opt
}
