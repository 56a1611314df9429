package server

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/shardlimiter/shardlimiter/transport"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthgrpc "google.golang.org/grpc/health/grpc_health_v1"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/shardlimiter/shardlimiter/limit"
	"github.com/shardlimiter/shardlimiter/transport/pb"
)

func TestGRPCGetRateLimits(t *testing.T) {
	t.Parallel()
	zeroDuration := func(r *pb.RateLimitRequest) { r.DurationMs = 0 }
	badAlgorithm := func(r *pb.RateLimitRequest) { r.Algorithm = 9 }
	under := func(key string, remaining int64) *pb.RateLimitResponse {
		return &pb.RateLimitResponse{Status: pb.Status_UNDER_LIMIT, Limit: 10, Remaining: remaining,
			ResetTimeMs: 1_700_000_000_124, Metadata: map[string]string{"owner": "node-a"}}
	}
	invalid := func(msg string) *pb.RateLimitResponse {
		return &pb.RateLimitResponse{Status: pb.Status_OVER_LIMIT, Limit: 10, Error: msg,
			Metadata: map[string]string{"reason": "invalid_argument"}}
	}
	tests := []struct {
		name      string
		reqs      []*pb.RateLimitRequest
		want      []*pb.RateLimitResponse
		wantCheck [][]string // keys of the batches the transport.Checker got
	}{
		{name: "empty", wantCheck: nil},
		{name: "in order", reqs: []*pb.RateLimitRequest{wireReq("a", 1, nil), wireReq("b", 20, nil), wireReq("c", 3, nil)},
			want: []*pb.RateLimitResponse{under("a", 9), {Status: pb.Status_OVER_LIMIT, Limit: 10, RetryAfterMs: -1,
				ResetTimeMs: 1_700_000_000_124, Metadata: map[string]string{"owner": "node-a"}}, under("c", 7)},
			wantCheck: [][]string{{"a", "b", "c"}}},
		{name: "bad items answered in place", reqs: []*pb.RateLimitRequest{wireReq("x", 1, zeroDuration),
			wireReq("a", 1, nil), wireReq("y", 1, badAlgorithm), wireReq("b", 2, nil), wireReq("z", 1, zeroDuration)},
			want: []*pb.RateLimitResponse{invalid("duration_ms must be > 0, got 0"), under("a", 9),
				invalid("unknown algorithm 9"), under("b", 8), invalid("duration_ms must be > 0, got 0")},
			wantCheck: [][]string{{"a", "b"}}},
		{name: "all bad never reach the checker", reqs: []*pb.RateLimitRequest{wireReq("x", 1, badAlgorithm)},
			want: []*pb.RateLimitResponse{invalid("unknown algorithm 9")}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			fake := &fakeChecker{Owner: "node-a"}
			_, target, dialer := startGRPC(t, testConfig{Checker: fake})
			rpc := pb.NewRateLimiterClient(dialConn(t, target, dialer))
			resp, err := rpc.GetRateLimits(ctxTimeout(t), &pb.GetRateLimitsRequest{Requests: tt.reqs})
			if err != nil {
				t.Fatalf("GetRateLimits(%s) = %v", tt.name, err)
			}
			got := resp.GetResponses()
			if len(got) != len(tt.want) {
				t.Fatalf("GetRateLimits(%s) answered %d items, want %d", tt.name, len(got), len(tt.want))
			}
			for i := range got {
				if !proto.Equal(got[i], tt.want[i]) {
					t.Errorf("GetRateLimits(%s)[%d] = %v, want %v", tt.name, i, got[i], tt.want[i])
				}
			}
			if keys := batchKeys(fake.Got()); !slices.EqualFunc(keys, tt.wantCheck, slices.Equal) {
				t.Errorf("transport.Checker got %q, want %q", keys, tt.wantCheck)
			}
		})
	}
}

func TestGRPCCallErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		maxBatch int
		items    int
		checker  transport.Checker
		want     codes.Code
		wantIs   error // a sentinel Client errors must match, if any
	}{
		{name: "batch at limit", maxBatch: 3, items: 3, checker: &fakeChecker{}, want: codes.OK},
		{name: "batch over limit", maxBatch: 3, items: 4, checker: &fakeChecker{}, want: codes.InvalidArgument},
		{name: "default limit", items: 1001, checker: &fakeChecker{}, want: codes.InvalidArgument},
		{name: "shutting down", items: 1, checker: &fakeChecker{Err: fmt.Errorf("node: %w", transport.ErrShuttingDown)},
			want: codes.Unavailable, wantIs: transport.ErrUnavailable},
		{name: "deadline", items: 1, checker: &fakeChecker{Err: context.DeadlineExceeded},
			want: codes.DeadlineExceeded, wantIs: transport.ErrTimeout},
		{name: "canceled", items: 1, checker: &fakeChecker{Err: context.Canceled}, want: codes.Canceled},
		{name: "other failure", items: 1, checker: &fakeChecker{Err: errors.New("disk on fire")}, want: codes.Internal},
		{name: "short answer", items: 2, want: codes.Internal,
			checker: transport.CheckerFunc(func(context.Context, []limit.Check) ([]limit.Result, error) { return nil, nil })},
		{name: "no checker: not served", items: 1, want: codes.Unimplemented},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, target, dialer := startGRPC(t, testConfig{Checker: tt.checker, MaxBatch: tt.maxBatch})
			client := dialClient(t, target, dialer)
			checks := make([]limit.Check, tt.items)
			for i := range checks {
				checks[i] = mkCheck(fmt.Sprint("k", i), 1)
			}
			results, err := client.GetRateLimits(ctxTimeout(t), checks)
			if got := status.Code(err); got != tt.want {
				t.Fatalf("GetRateLimits(%d items) = %v, want code %v", tt.items, err, tt.want)
			}
			if tt.want == codes.OK && len(results) != tt.items {
				t.Fatalf("GetRateLimits(%d items) answered %d", tt.items, len(results))
			}
			if tt.wantIs != nil && !errors.Is(err, tt.wantIs) {
				t.Errorf("GetRateLimits error %v does not match %v", err, tt.wantIs)
			}
		})
	}
}

func TestGRPCPeers(t *testing.T) {
	t.Parallel()
	client, local := &fakeChecker{Owner: "front"}, &fakeChecker{Owner: "local"}
	_, target, dialer := startGRPC(t, testConfig{Checker: client, Local: local})
	rpc := pb.NewPeersClient(dialConn(t, target, dialer))
	resp, err := rpc.ForwardRateLimits(ctxTimeout(t), &pb.ForwardRateLimitsRequest{
		Requests: []*pb.RateLimitRequest{wireReq("a", 1, nil), wireReq("b", 1, func(r *pb.RateLimitRequest) { r.Algorithm = 8 })}})
	if err != nil {
		t.Fatalf("ForwardRateLimits = %v", err)
	}
	if owner := resp.GetOwner(); owner != "local" || resp.GetResponses()[0].GetMetadata() != nil {
		t.Errorf("ForwardRateLimits answered by %q with item metadata %v, want owner %q named once",
			owner, resp.GetResponses()[0].GetMetadata(), "local")
	}
	if e := resp.GetResponses()[1].GetError(); e != "unknown algorithm 8" {
		t.Errorf("ForwardRateLimits bad item error = %q, want %q", e, "unknown algorithm 8")
	}
	if n := len(client.Got()); n != 0 {
		t.Errorf("client-facing transport.Checker got %d calls from Peers, want 0", n)
	}

	_, target2, dialer2 := startGRPC(t, testConfig{Checker: client})
	_, err = pb.NewPeersClient(dialConn(t, target2, dialer2)).ForwardRateLimits(ctxTimeout(t), &pb.ForwardRateLimitsRequest{})
	if status.Code(err) != codes.Unimplemented {
		t.Errorf("ForwardRateLimits without Local = %v, want Unimplemented", err)
	}
}

// rawCodec sends bytes as they are, to put malformed requests on the wire.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error)      { return *v.(*[]byte), nil }
func (rawCodec) Unmarshal(data []byte, v any) error { *v.(*[]byte) = data; return nil }
func (rawCodec) Name() string                       { return "proto" }

// A request that is not valid proto fails the call with InvalidArgument,
// on both services, and never reaches the transport.Checker.
func TestGRPCMalformedRequest(t *testing.T) {
	t.Parallel()
	fake := &fakeChecker{}
	_, target, dialer := startGRPC(t, testConfig{Checker: fake, Local: fake})
	conn := dialConn(t, target, dialer)
	bad := [][]byte{
		{0x0a, 0xff, 0xff, 0xff, 0xff, 0x0f}, // an item longer than the message
		{0x0a, 0x02, 0x0a, 0x01},             // truncated name
		{0x0a, 0x03, 0x12, 0x01, 0xff},       // key not UTF-8
		{0x0f},                               // invalid wire type
	}
	for _, method := range []string{pb.RateLimiter_GetRateLimits_FullMethodName, pb.Peers_ForwardRateLimits_FullMethodName} {
		for _, req := range bad {
			var reply []byte
			err := conn.Invoke(ctxTimeout(t), method, &req, &reply, grpc.ForceCodec(rawCodec{}))
			if status.Code(err) != codes.InvalidArgument {
				t.Errorf("%s(%x) = %v, want InvalidArgument", method, req, err)
			}
		}
	}
	if n := len(fake.Got()); n != 0 {
		t.Errorf("transport.Checker got %d calls, want 0", n)
	}
}

func TestGRPCHealth(t *testing.T) {
	t.Parallel()
	srv, target, dialer := startGRPC(t, testConfig{Checker: &fakeChecker{}, Local: &fakeChecker{}})
	health := healthgrpc.NewHealthClient(dialConn(t, target, dialer))
	check := func(service string) healthgrpc.HealthCheckResponse_ServingStatus {
		resp, err := health.Check(ctxTimeout(t), &healthgrpc.HealthCheckRequest{Service: service})
		if err != nil {
			t.Fatalf("Health.Check(%q) = %v", service, err)
		}
		return resp.GetStatus()
	}
	steps := []struct {
		serving *bool
		want    healthgrpc.HealthCheckResponse_ServingStatus
	}{
		{nil, healthgrpc.HealthCheckResponse_NOT_SERVING},
		{ptr(true), healthgrpc.HealthCheckResponse_SERVING},
		{ptr(false), healthgrpc.HealthCheckResponse_NOT_SERVING},
		{ptr(true), healthgrpc.HealthCheckResponse_SERVING},
	}
	for i, st := range steps {
		if st.serving != nil {
			srv.SetServing(*st.serving)
		}
		for _, svc := range []string{"", transport.RateLimiterService, transport.PeersService} {
			if got := check(svc); got != st.want {
				t.Errorf("step %d: Health.Check(%q) = %v, want %v", i, svc, got, st.want)
			}
		}
	}
}

func ptr[T any](v T) *T { return &v }

func TestGRPCReflection(t *testing.T) {
	t.Parallel()
	_, target, dialer := startGRPC(t, testConfig{Checker: &fakeChecker{}, Local: &fakeChecker{}})
	refl := reflectionpb.NewServerReflectionClient(dialConn(t, target, dialer))
	stream, err := refl.ServerReflectionInfo(ctxTimeout(t))
	if err != nil {
		t.Fatalf("ServerReflectionInfo = %v", err)
	}
	if err := stream.Send(&reflectionpb.ServerReflectionRequest{
		MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}}); err != nil {
		t.Fatalf("Send(ListServices) = %v", err)
	}
	resp, err := stream.Recv()
	if err != nil {
		t.Fatalf("Recv = %v", err)
	}
	_ = stream.CloseSend()
	var names []string
	for _, s := range resp.GetListServicesResponse().GetService() {
		names = append(names, s.GetName())
	}
	for _, want := range []string{transport.RateLimiterService, transport.PeersService, "grpc.health.v1.Health"} {
		if !slices.Contains(names, want) {
			t.Errorf("reflection lists %q, want it to contain %q", names, want)
		}
	}
}

// TestGRPCServesOnlyItsServices: a client listener (transport.Checker only) does not
// serve Peers or State, so no client can reach the call that decides
// without routing; a peer listener (Local, State) does not serve the
// client API.
func TestGRPCServesOnlyItsServices(t *testing.T) {
	t.Parallel()
	client := &fakeChecker{}
	_, target, dialer := startGRPC(t, testConfig{Checker: client})
	conn := dialConn(t, target, dialer)
	if err := conn.Invoke(ctxTimeout(t), pb.Peers_ForwardRateLimits_FullMethodName, &pb.GetRateLimitsRequest{}, &pb.GetRateLimitsResponse{}); status.Code(err) != codes.Unimplemented {
		t.Errorf("Peers on the client listener = %v, want Unimplemented", err)
	}
	if err := conn.Invoke(ctxTimeout(t), pb.State_Pull_FullMethodName, &pb.PullStateRequest{}, &pb.PullStateResponse{}); status.Code(err) != codes.Unimplemented {
		t.Errorf("State on the client listener = %v, want Unimplemented", err)
	}
	health := healthgrpc.NewHealthClient(conn)
	if _, err := health.Check(ctxTimeout(t), &healthgrpc.HealthCheckRequest{Service: transport.PeersService}); status.Code(err) != codes.NotFound {
		t.Errorf("Health.Check(Peers) on the client listener = %v, want NotFound", err)
	}

	_, ptarget, pdialer := startGRPC(t, testConfig{Local: &fakeChecker{}})
	if _, err := dialClient(t, ptarget, pdialer).GetRateLimits(ctxTimeout(t), []limit.Check{mkCheck("k", 1)}); status.Code(err) != codes.Unimplemented {
		t.Errorf("RateLimiter on the peer listener = %v, want Unimplemented", err)
	}
	if n := len(client.Got()); n != 0 {
		t.Errorf("the client transport.Checker got %d calls, want 0", n)
	}
}

// GracefulStop answers the RPC in flight and is not held up by a health
// Watch stream.
func TestGRPCGracefulStop(t *testing.T) {
	t.Parallel()
	entered, release := make(chan struct{}), make(chan struct{})
	blocking := transport.CheckerFunc(func(_ context.Context, checks []limit.Check) ([]limit.Result, error) {
		close(entered)
		<-release
		return make([]limit.Result, len(checks)), nil
	})
	srv, target, dialer := startGRPC(t, testConfig{Checker: blocking})
	srv.SetServing(true)
	conn := dialConn(t, target, dialer)
	watch, err := healthgrpc.NewHealthClient(conn).Watch(ctxTimeout(t), &healthgrpc.HealthCheckRequest{})
	if err != nil {
		t.Fatalf("Health.Watch = %v", err)
	}
	if resp, err := watch.Recv(); err != nil || resp.GetStatus() != healthgrpc.HealthCheckResponse_SERVING {
		t.Fatalf("Watch.Recv = %v, %v, want SERVING", resp, err)
	}

	answered := make(chan error, 1)
	go func() {
		_, err := pb.NewRateLimiterClient(conn).GetRateLimits(ctxTimeout(t),
			&pb.GetRateLimitsRequest{Requests: []*pb.RateLimitRequest{wireReq("a", 1, nil)}})
		answered <- err
	}()
	<-entered
	stopped := make(chan struct{})
	go func() { srv.GracefulStop(); close(stopped) }()
	close(release)
	if err := <-answered; err != nil {
		t.Errorf("GetRateLimits in flight during GracefulStop = %v, want an answer", err)
	}
	<-stopped
}

// BenchmarkGRPCBatch100 is one client round trip of a 100-item batch over
// bufconn, conversion and encoding on both sides included, under the
// default in-flight bound, shared fairly as a node's client bound is.
func BenchmarkGRPCBatch100(b *testing.B) { benchGRPCBatch(b, 100) }

// BenchmarkGRPCBatch1 is the same with one check per call, where the cost
// per call (the bound's charge at the headers among it) weighs most.
func BenchmarkGRPCBatch1(b *testing.B) { benchGRPCBatch(b, 1) }

func benchGRPCBatch(b *testing.B, size int) {
	_, target, dialer := startGRPC(b, testConfig{Checker: trivialChecker, InFlight: NewFairInFlight(DefaultInFlightChecks(0))})
	client := dialClient(b, target, dialer)
	checks := benchChecks(size)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := client.GetRateLimits(ctx, checks); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N*len(checks))/b.Elapsed().Seconds(), "checks/s")
}

// BenchmarkGRPCBatch100Parallel is the same with concurrent callers.
func BenchmarkGRPCBatch100Parallel(b *testing.B) {
	_, target, dialer := startGRPC(b, testConfig{Checker: trivialChecker, InFlight: NewFairInFlight(DefaultInFlightChecks(0))})
	client := dialClient(b, target, dialer)
	checks := benchChecks(100)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := client.GetRateLimits(context.Background(), checks); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N*len(checks))/b.Elapsed().Seconds(), "checks/s")
}

// BenchmarkGRPCRefused1000 is the round trip of a call of 1000 checks the
// server refuses: 15,500 of the default 16,000 units are in use, so it does
// not fit (client-side encoding included).
func BenchmarkGRPCRefused1000(b *testing.B) {
	bound := NewFairInFlight(16000)
	_, target, dialer := startGRPC(b, testConfig{Checker: trivialChecker, InFlight: bound})
	client := dialClient(b, target, dialer)
	checks := benchChecks(1000)
	ctx := context.Background()
	if _, err := client.GetRateLimits(ctx, checks); err != nil {
		b.Fatal(err)
	}
	if !bound.TryAcquire(15500) {
		b.Fatal("TryAcquire(15500) on an idle bound refused")
	}
	defer bound.Release(15500)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := client.GetRateLimits(ctx, checks); !transport.IsShed(err) {
			b.Fatalf("GetRateLimits(1000) with 15,500 of 16,000 in use = %v, want a refusal", err)
		}
	}
}
