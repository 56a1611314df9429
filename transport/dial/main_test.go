package dial

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"
	"google.golang.org/grpc"

	"github.com/shardlimiter/shardlimiter/api/native"
	"github.com/shardlimiter/shardlimiter/transport"
	"github.com/shardlimiter/shardlimiter/transport/pb"
	"github.com/shardlimiter/shardlimiter/transport/server"
	"github.com/shardlimiter/shardlimiter/transport/transporttest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

type fakeChecker = transporttest.FakeChecker

var (
	fakeDecide  = transporttest.FakeDecide
	mkCheck     = transporttest.MkCheck
	ctxTimeout  = transporttest.Ctx
	benchChecks = transporttest.BenchChecks
)

// testConfig is a node's listener as the clients of this package meet it.
type testConfig struct {
	// Checker answers RateLimiter, Local answers Peers; nil: not served.
	Checker, Local transport.Checker
	// Members answers Cluster (with transport.Checker).
	Members       native.MembershipSource
	MaxBatch      int
	Metrics       *server.Metrics
	InFlight      *server.InFlight
	ServerOptions []grpc.ServerOption
}

// startGRPC serves cfg over bufconn for the test's lifetime and returns a
// dial target and option that reach it.
func startGRPC(t testing.TB, cfg testConfig) (*server.Listener, string, grpc.DialOption) {
	t.Helper()
	l := server.NewClientListener(server.Config{MaxBatch: cfg.MaxBatch, Metrics: cfg.Metrics, InFlight: cfg.InFlight, ServerOptions: cfg.ServerOptions})
	if cfg.Checker != nil {
		native.Register(l, cfg.Checker, cfg.Members)
	}
	if cfg.Local != nil {
		l.RegisterChecks(&pb.Peers_ServiceDesc, cfg.Local, server.Peers)
	}
	target, opt := transporttest.Bufconn(t, l)
	return l, target, opt
}

// sampleValue returns the value of the counter name{label=value}.
func sampleValue(t testing.TB, reg *prometheus.Registry, name, label, value string) float64 {
	v, _ := transporttest.Sample(t, reg, name, label, value)
	return v
}
