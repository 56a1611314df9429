// Package transporttest holds the fixtures the tests of the transport
// packages and of the API packages share: a deterministic Checker that
// records its batches, valid checks, and a gRPC server over bufconn. It
// imports no listener, client or API package, so that each of their
// tests may use it without an import cycle.
package transporttest

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/test/bufconn"

	"github.com/shardlimiter/shardlimiter/limit"
	"github.com/shardlimiter/shardlimiter/transport"
	"github.com/shardlimiter/shardlimiter/transport/pb"
)

// ResetAt is the ResetAt of every fake decision: not a whole millisecond,
// so rounding is visible on the wire.
const ResetAt = int64(1_700_000_000_123_456_789)

// FakeChecker decides deterministically and records every batch it got.
// Allowed when Hits <= Limit; Remaining = Limit - Hits; RetryAfter Never
// when rejected; Owner names the checker. It is safe for concurrent use.
type FakeChecker struct {
	Owner string
	Err   error // returned for every call when set

	mu    sync.Mutex
	calls [][]limit.Check
}

// Check records checks and decides them (see FakeChecker).
func (f *FakeChecker) Check(_ context.Context, checks []limit.Check) ([]limit.Result, error) {
	f.mu.Lock()
	f.calls = append(f.calls, slices.Clone(checks))
	f.mu.Unlock()
	if f.Err != nil {
		return nil, f.Err
	}
	results := make([]limit.Result, len(checks))
	for i, c := range checks {
		results[i] = FakeDecide(c, f.Owner)
	}
	return results, nil
}

// FakeDecide is FakeChecker's decision of c by owner.
func FakeDecide(c limit.Check, owner string) limit.Result {
	r := limit.Result{Owner: owner}
	r.ResetAt = ResetAt
	if c.Hits <= c.Rule.Limit {
		r.Allowed, r.Remaining = true, c.Rule.Limit-c.Hits
	} else {
		r.RetryAfter = limit.Never
	}
	return r
}

// Got returns the batches the checker received.
func (f *FakeChecker) Got() [][]limit.Check {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.calls)
}

// MkCheck returns a valid token-bucket check of hits on key.
func MkCheck(key string, hits int64) limit.Check {
	return limit.Check{Name: "rule", Key: key, Hits: hits,
		Rule: limit.Rule{Algorithm: limit.TokenBucket, Limit: 10, Period: time.Second}}
}

// Ctx returns a test context bounded so that a bug fails instead of hanging.
func Ctx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// Server is what Bufconn serves: a gRPC server or a listener of package
// transport/server.
type Server interface {
	Serve(lis net.Listener) error
	Stop()
}

// Bufconn serves srv over bufconn for the test's lifetime (stopped at its
// end, Serve checked to return nil) and returns a dial target and option
// that reach it.
func Bufconn(t testing.TB, srv Server) (string, grpc.DialOption) {
	t.Helper()
	lis := bufconn.Listen(1 << 20)
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
	return "passthrough:///bufnet", dialer
}

// BenchChecks returns n valid checks of one hit, each on a key of its own.
func BenchChecks(n int) []limit.Check {
	checks := make([]limit.Check, n)
	for i := range checks {
		checks[i] = MkCheck(fmt.Sprintf("account:%d", i), 1)
	}
	return checks
}

// WireReq is a valid request of hits on key, edited by edit when set.
func WireReq(key string, hits int64, edit func(*pb.RateLimitRequest)) *pb.RateLimitRequest {
	r := &pb.RateLimitRequest{Name: "rule", UniqueKey: key, Hits: hits, Limit: 10, DurationMs: 1000}
	if edit != nil {
		edit(r)
	}
	return r
}

// BatchKeys lists the keys of each batch.
func BatchKeys(calls [][]limit.Check) [][]string {
	var out [][]string
	for _, c := range calls {
		var keys []string
		for _, ch := range c {
			keys = append(keys, ch.Key)
		}
		out = append(out, keys)
	}
	return out
}

// TrivialChecker admits everything; its cost is the allocation of the results.
var TrivialChecker = transport.CheckerFunc(func(_ context.Context, checks []limit.Check) ([]limit.Result, error) {
	results := make([]limit.Result, len(checks))
	for i := range results {
		results[i] = limit.Result{Decision: limit.Decision{Allowed: true, Remaining: 1, ResetAt: ResetAt}, Owner: "bench"}
	}
	return results, nil
})

// ItemsJSON is a JSON GetRateLimitsRequest of n valid items on keys
// prefix0, prefix1, ….
func ItemsJSON(prefix string, n int) string {
	var b strings.Builder
	b.WriteString(`{"requests":[`)
	for i := range n {
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, `{"name":"r","unique_key":"%s%d","hits":1,"limit":10,"duration_ms":1000}`, prefix, i)
	}
	b.WriteString(`]}`)
	return b.String()
}

// DialConn returns a raw connection to a bufconn server (see Bufconn),
// closed at the end of the test.
func DialConn(t testing.TB, target string, dialer grpc.DialOption) *grpc.ClientConn {
	t.Helper()
	c, err := grpc.NewClient(target, dialer, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatalf("grpc.NewClient(%q) = %v", target, err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// Sample finds name{labels…} in reg and returns its counter value or, for a
// histogram, its sample count and sum.
func Sample(t testing.TB, reg *prometheus.Registry, name string, labels ...string) (value, sum float64) {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatalf("Gather = %v", err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	metrics:
		for _, m := range f.GetMetric() {
			have := map[string]string{}
			for _, l := range m.GetLabel() {
				have[l.GetName()] = l.GetValue()
			}
			for i := 0; i+1 < len(labels); i += 2 {
				if have[labels[i]] != labels[i+1] {
					continue metrics
				}
			}
			if h := m.GetHistogram(); h != nil {
				return float64(h.GetSampleCount()), h.GetSampleSum()
			}
			return m.GetCounter().GetValue(), 0
		}
	}
	t.Fatalf("no sample %s%v", name, labels)
	return 0, 0
}
