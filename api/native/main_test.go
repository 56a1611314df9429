package native

import (
	"context"
	"net/http"
	"testing"

	"go.uber.org/goleak"
	"google.golang.org/grpc"

	"github.com/shardlimiter/shardlimiter/transport"
	"github.com/shardlimiter/shardlimiter/transport/server"
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
	itemsJSON      = transporttest.ItemsJSON
	ctxTimeout     = transporttest.Ctx
)

const resetAt = transporttest.ResetAt

// httpConfig is an HTTP listener with the native API and the node's views
// the test names, as cmd/shardlimiter assembles them.
type httpConfig struct {
	Checker      transport.Checker // POST /v1/GetRateLimits; nil: not served
	MaxBatch     int
	MaxBodyBytes int64
	Ready        func() bool
	Metrics      http.Handler              // GET /metrics; nil: 404
	Cluster      func() any                // GET /v1/cluster; nil: 404
	Rings        func(context.Context) any // GET /v1/cluster/rings; nil: 404
	Telemetry    *server.Metrics
	InFlight     *server.InFlight
	BodyBytes    *server.InFlight
}

func newHTTPHandler(cfg httpConfig) http.Handler {
	h := server.NewHTTP(server.HTTPConfig{MaxBatch: cfg.MaxBatch, MaxBodyBytes: cfg.MaxBodyBytes, Ready: cfg.Ready,
		Metrics: cfg.Telemetry, InFlight: cfg.InFlight, BodyBytes: cfg.BodyBytes})
	if cfg.Checker != nil {
		RegisterHTTP(h, cfg.Checker)
	}
	if cfg.Metrics != nil {
		h.Handle("/metrics", cfg.Metrics, http.MethodGet, http.MethodHead)
	}
	if cfg.Cluster != nil {
		h.HandleView("/v1/cluster", func(*http.Request) any { return cfg.Cluster() })
	}
	if cfg.Rings != nil {
		h.HandleView("/v1/cluster/rings", func(r *http.Request) any { return cfg.Rings(r.Context()) })
	}
	return h
}

// testConfig is a client listener with the native API.
type testConfig struct {
	Checker  transport.Checker
	Members  MembershipSource
	MaxBatch int
	Metrics  *server.Metrics
	InFlight *server.InFlight
}

// startGRPC serves cfg over bufconn for the test's lifetime and returns a
// dial target and option that reach it.
func startGRPC(t testing.TB, cfg testConfig) (*server.Listener, string, grpc.DialOption) {
	t.Helper()
	l := server.NewClientListener(server.Config{MaxBatch: cfg.MaxBatch, Metrics: cfg.Metrics, InFlight: cfg.InFlight})
	Register(l, cfg.Checker, cfg.Members)
	target, opt := transporttest.Bufconn(t, l)
	return l, target, opt
}
