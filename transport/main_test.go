package transport

import (
	"context"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/test/bufconn"

	"github.com/shardlimiter/shardlimiter/limit"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// resetAt is the ResetAt of every fake decision: not a whole millisecond,
// so rounding is visible on the wire.
const resetAt = int64(1_700_000_000_123_456_789)

// fakeChecker decides deterministically and records every batch it got.
// Allowed when Hits <= Limit; Remaining = Limit - Hits; RetryAfter Never
// when rejected; Owner names the checker.
type fakeChecker struct {
	owner string
	err   error // returned for every call when set

	mu    sync.Mutex
	calls [][]limit.Check
}

func (f *fakeChecker) Check(_ context.Context, checks []limit.Check) ([]limit.Result, error) {
	f.mu.Lock()
	f.calls = append(f.calls, slices.Clone(checks))
	f.mu.Unlock()
	if f.err != nil {
		return nil, f.err
	}
	results := make([]limit.Result, len(checks))
	for i, c := range checks {
		results[i] = fakeDecide(c, f.owner)
	}
	return results, nil
}

func fakeDecide(c limit.Check, owner string) limit.Result {
	r := limit.Result{Owner: owner}
	r.ResetAt = resetAt
	if c.Hits <= c.Rule.Limit {
		r.Allowed, r.Remaining = true, c.Rule.Limit-c.Hits
	} else {
		r.RetryAfter = limit.Never
	}
	return r
}

// got returns the batches the checker received.
func (f *fakeChecker) got() [][]limit.Check {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.calls)
}

// startGRPC serves cfg over bufconn for the test's lifetime and returns a
// dial target and option that reach it.
func startGRPC(t testing.TB, cfg GRPCConfig) (*GRPCServer, string, grpc.DialOption) {
	t.Helper()
	lis := bufconn.Listen(1 << 20)
	srv := NewGRPCServer(cfg)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()
	t.Cleanup(func() {
		srv.Stop()
		if err := <-served; err != nil {
			t.Errorf("Serve = %v, want nil after Stop", err)
		}
	})
	dialer := grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) {
		return lis.DialContext(ctx)
	})
	return srv, "passthrough:///bufnet", dialer
}

// dialClient returns a Client of the server, closed at the end of the test.
func dialClient(t testing.TB, target string, opts ...grpc.DialOption) *Client {
	t.Helper()
	c, err := Dial(target, opts...)
	if err != nil {
		t.Fatalf("Dial(%q) = %v", target, err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// mkCheck returns a valid token-bucket check of hits on key.
func mkCheck(key string, hits int64) limit.Check {
	return limit.Check{Name: "rule", Key: key, Hits: hits,
		Rule: limit.Rule{Algorithm: limit.TokenBucket, Limit: 10, Period: time.Second}}
}

// ctxTimeout is a test context bounded so that a bug fails instead of hanging.
func ctxTimeout(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}
