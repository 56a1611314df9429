package server

import (
	"testing"

	"go.uber.org/goleak"
	"google.golang.org/grpc"

	"github.com/shardlimiter/shardlimiter/transport"
	"github.com/shardlimiter/shardlimiter/transport/dial"
	"github.com/shardlimiter/shardlimiter/transport/pb"
	"github.com/shardlimiter/shardlimiter/transport/transporttest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

type fakeChecker = transporttest.FakeChecker

var (
	sample         = transporttest.Sample
	dialConn       = transporttest.DialConn
	wireReq        = transporttest.WireReq
	batchKeys      = transporttest.BatchKeys
	trivialChecker = transporttest.TrivialChecker
	fakeDecide     = transporttest.FakeDecide
	mkCheck        = transporttest.MkCheck
	ctxTimeout     = transporttest.Ctx
	benchChecks    = transporttest.BenchChecks
)

// testConfig is a listener with the checks services the test names.
type testConfig struct {
	// Checker answers RateLimiter, Local answers Peers; nil: not served.
	// With Local alone the listener is a peer listener.
	Checker, Local transport.Checker
	MaxBatch       int
	Metrics        *Metrics
	InFlight       *InFlight
	ServerOptions  []grpc.ServerOption
	// Register registers further services.
	Register func(*Listener)
}

// startGRPC serves cfg over bufconn for the test's lifetime and returns a
// dial target and option that reach it.
func startGRPC(t testing.TB, cfg testConfig) (*Listener, string, grpc.DialOption) {
	t.Helper()
	lc := Config{MaxBatch: cfg.MaxBatch, Metrics: cfg.Metrics, InFlight: cfg.InFlight, ServerOptions: cfg.ServerOptions}
	newListener := NewClientListener
	if cfg.Checker == nil && cfg.Local != nil {
		newListener = NewPeerListener
	}
	l := newListener(lc)
	if cfg.Checker != nil {
		l.RegisterChecks(&pb.RateLimiter_ServiceDesc, cfg.Checker, Clients)
	}
	if cfg.Local != nil {
		l.RegisterChecks(&pb.Peers_ServiceDesc, cfg.Local, Peers)
	}
	if cfg.Register != nil {
		cfg.Register(l)
	}
	target, opt := transporttest.Bufconn(t, l)
	return l, target, opt
}

// dialClient returns a Client of the server, closed at the end of the test.
func dialClient(t testing.TB, target string, opts ...grpc.DialOption) *dial.Client {
	t.Helper()
	c, err := dial.Dial(target, opts...)
	if err != nil {
		t.Fatalf("dial.Dial(%q) = %v", target, err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}
