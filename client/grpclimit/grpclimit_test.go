package grpclimit

import (
	"context"
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthgrpc "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/shardlimiter/shardlimiter/client"
	"github.com/shardlimiter/shardlimiter/limit"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// quota is a fake Checker: limit admitted calls per key, then refusals
// with a retry delay; err, when set, fails every check.
type quota struct {
	err  error
	mu   sync.Mutex
	used map[string]int64
}

func (q *quota) Check(_ context.Context, c limit.Check) (limit.Result, error) {
	if q.err != nil {
		return limit.Result{}, q.err
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	var r limit.Result
	if q.used[c.Key]+c.Hits <= c.Rule.Limit {
		q.used[c.Key] += c.Hits
		r.Allowed = true
	} else if c.Hits > c.Rule.Limit {
		r.RetryAfter = limit.Never
	} else {
		r.RetryAfter = 1500 * time.Millisecond
	}
	return r, nil
}

// serve runs the standard health service behind the interceptors of cfg
// on loopback and returns a client of it.
func serve(t *testing.T, cfg Config) healthgrpc.HealthClient {
	t.Helper()
	cfg.Name = "calls"
	cfg.Rule = limit.Rule{Algorithm: limit.FixedWindow, Limit: 2, Period: time.Minute}
	cfg.Key = func(ctx context.Context, _ string) string {
		md, _ := metadata.FromIncomingContext(ctx)
		if v := md.Get("x-account"); len(v) > 0 {
			return v[0]
		}
		return ""
	}
	unary, err := UnaryServerInterceptor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	stream, err := StreamServerInterceptor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.UnaryInterceptor(unary), grpc.StreamInterceptor(stream))
	hs := health.NewServer()
	healthgrpc.RegisterHealthServer(srv, hs)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); srv.Serve(lis) }()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn.Close()
		hs.Shutdown()
		srv.Stop()
		<-done
	})
	return healthgrpc.NewHealthClient(conn)
}

func as(account string) context.Context {
	return metadata.AppendToOutgoingContext(context.Background(), "x-account", account)
}

// retryDelay returns the RetryInfo delay of err, or -1 when it has none.
func retryDelay(err error) time.Duration {
	for _, d := range status.Convert(err).Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok {
			return ri.GetRetryDelay().AsDuration()
		}
	}
	return -1
}

func TestUnaryLimits(t *testing.T) {
	t.Parallel()
	hc := serve(t, Config{Checker: &quota{used: map[string]int64{}}})
	for i := range 3 {
		_, err := hc.Check(as("a"), &healthgrpc.HealthCheckRequest{})
		if i < 2 && err != nil {
			t.Fatalf("call %d: %v, want admitted", i+1, err)
		}
		if i == 2 {
			if status.Code(err) != codes.ResourceExhausted || retryDelay(err) != 1500*time.Millisecond {
				t.Fatalf("call 3: %v (retry %v), want ResourceExhausted with RetryInfo 1.5s", err, retryDelay(err))
			}
		}
	}
	if _, err := hc.Check(as("b"), &healthgrpc.HealthCheckRequest{}); err != nil {
		t.Errorf("another key: %v", err)
	}
	if _, err := hc.Check(context.Background(), &healthgrpc.HealthCheckRequest{}); err != nil {
		t.Errorf("no key: %v, want not limited", err)
	}
}

func TestStreamLimits(t *testing.T) {
	t.Parallel()
	hc := serve(t, Config{Checker: &quota{used: map[string]int64{}}})
	for i := range 3 {
		ctx, cancel := context.WithCancel(as("s"))
		w, err := hc.Watch(ctx, &healthgrpc.HealthCheckRequest{})
		if err == nil {
			_, err = w.Recv()
		}
		cancel()
		switch {
		case i < 2 && err != nil:
			t.Fatalf("stream %d: %v, want admitted", i+1, err)
		case i == 2 && (status.Code(err) != codes.ResourceExhausted || retryDelay(err) != 1500*time.Millisecond):
			t.Fatalf("stream 3: %v, want ResourceExhausted with RetryInfo 1.5s", err)
		}
	}
}

func TestNeverFits(t *testing.T) {
	t.Parallel()
	cfg := Config{Checker: &quota{used: map[string]int64{}}, Hits: func(context.Context, string) int64 { return 5 }}
	hc := serve(t, cfg)
	_, err := hc.Check(as("big"), &healthgrpc.HealthCheckRequest{})
	if status.Code(err) != codes.ResourceExhausted || retryDelay(err) != -1 {
		t.Errorf("a call over the capacity: %v, want ResourceExhausted without RetryInfo", err)
	}
}

func TestUnavailable(t *testing.T) {
	t.Parallel()
	down := &quota{err: errors.Join(client.ErrUnavailable, errors.New("no node"))}
	t.Run("fail open", func(t *testing.T) {
		hc := serve(t, Config{Checker: down, FailOpen: true})
		if _, err := hc.Check(as("a"), &healthgrpc.HealthCheckRequest{}); err != nil {
			t.Errorf("fail open: %v, want admitted", err)
		}
	})
	t.Run("fail closed", func(t *testing.T) {
		hc := serve(t, Config{Checker: down, UnavailableRetry: 3 * time.Second})
		_, err := hc.Check(as("a"), &healthgrpc.HealthCheckRequest{})
		if status.Code(err) != codes.Unavailable || retryDelay(err) != 3*time.Second {
			t.Errorf("fail closed: %v, want Unavailable with RetryInfo 3s", err)
		}
	})
	t.Run("invalid", func(t *testing.T) {
		hc := serve(t, Config{Checker: &quota{err: &client.CheckError{Reason: limit.Invalid, Msg: "bad"}}, FailOpen: true})
		if _, err := hc.Check(as("a"), &healthgrpc.HealthCheckRequest{}); status.Code(err) != codes.Internal {
			t.Errorf("invalid check: %v, want Internal", err)
		}
	})
}

func TestConfigErrors(t *testing.T) {
	for _, cfg := range []Config{
		{},
		{Checker: &quota{}, Name: "x"},
		{Checker: &quota{}, Key: func(context.Context, string) string { return "" }},
		{Checker: &quota{}, Name: "x", Key: func(context.Context, string) string { return "" }, Rule: limit.Rule{Limit: -1}},
	} {
		if _, err := UnaryServerInterceptor(cfg); err == nil {
			t.Errorf("UnaryServerInterceptor(%+v) succeeded", cfg)
		}
	}
}
