package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"

	gubapi "github.com/shardlimiter/shardlimiter/api/gubernator"
	"github.com/shardlimiter/shardlimiter/api/gubernator/gubpb"
	"github.com/shardlimiter/shardlimiter/internal/poll"
	"github.com/shardlimiter/shardlimiter/limit"
	"github.com/shardlimiter/shardlimiter/transport"
	"github.com/shardlimiter/shardlimiter/transport/dial"
)

// gubernator's API on the node (compat/gubernator holds gubernator's own
// cases): pb.gubernator.V1 on the client gRPC port, listed by health and
// reflection, its gateway on --gubernator-http-addr, its calls in the
// server metrics under their own api, and the native API refusing its
// algorithm numbers.
func TestGubernatorAPIOnTheNode(t *testing.T) {
	t.Parallel()
	gubHTTP := freeAddr(t)
	s := serve(t, "--gubernator-http-addr", gubHTTP)
	conn, err := grpc.NewClient(s.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	poll.Until(t, 5*time.Second, func() bool {
		r, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: gubapi.ServiceName})
		return err == nil && r.Status == healthpb.HealthCheckResponse_SERVING
	}, "health SERVING for "+gubapi.ServiceName)
	stream, err := reflectionpb.NewServerReflectionClient(conn).ServerReflectionInfo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}}); err != nil {
		t.Fatal(err)
	}
	rr, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	listed := fmt.Sprint(rr.GetListServicesResponse().GetService())
	if !strings.Contains(listed, "pb.gubernator.V1") || !strings.Contains(listed, transport.RateLimiterService) {
		t.Errorf("reflection lists %s, want pb.gubernator.V1 beside %s", listed, transport.RateLimiterService)
	}

	g := gubpb.NewV1Client(conn)
	resp, err := g.GetRateLimits(ctx, &gubpb.GetRateLimitsReq{Requests: []*gubpb.RateLimitReq{
		{Name: "n", UniqueKey: "k", Hits: 1, Limit: 5, Duration: 60_000, Algorithm: gubpb.Algorithm_LEAKY_BUCKET}}})
	if err != nil || resp.GetResponses()[0].GetRemaining() != 4 {
		t.Fatalf("V1.GetRateLimits = %v, %v", resp, err)
	}
	r, err := http.Post("http://"+gubHTTP+"/v1/GetRateLimits", "application/json",
		strings.NewReader(`{"requests":[{"name":"n","unique_key":"k","hits":1,"limit":5,"duration":60000,"algorithm":"LEAKY_BUCKET"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(r.Body)
	r.Body.Close()
	if r.StatusCode != 200 || !strings.Contains(string(body), `"remaining":"3"`) {
		t.Errorf("gateway POST = %d %s, want remaining 3 (one key with the gRPC call)", r.StatusCode, body)
	}

	// the native API refuses the gubernator algorithms: they are internal
	c, err := dial.Dial(s.grpc)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	res, err := c.GetRateLimits(ctx, []limit.Check{{Name: "n", Key: "k", Hits: 1,
		Rule: limit.Rule{Algorithm: limit.GubernatorTokenBucket, Limit: 5, Period: time.Minute}}})
	if err != nil || !strings.Contains(res[0].Error, "unknown algorithm 5") {
		t.Errorf("native call with algorithm 5 = %+v, %v; want an item error", res, err)
	}

	mresp, err := http.Get("http://" + s.http + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(mresp.Body)
	mresp.Body.Close()
	for _, series := range []string{
		`shardlimiter_server_request_duration_seconds_count{api="gubernator_grpc",code="OK",method="GetRateLimits"} 1`,
		`shardlimiter_server_request_duration_seconds_count{api="gubernator_http",code="200",method="GetRateLimits"} 1`,
		`shardlimiter_server_checks_total{algorithm="GUBERNATOR_LEAKY_BUCKET",outcome="under_limit"} 2`,
	} {
		if !strings.Contains(string(metrics), series) {
			t.Errorf("/metrics lacks %s", series)
		}
	}
}

// freeAddr returns a loopback address free now, for a listener whose
// address the serve helper does not read back.
func freeAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// BenchmarkGubernatorAPI measures gubernator's API against the native one
// on one node (the real binary, a process of its own) over loopback gRPC,
// batch 1 and batch 100, spread keys (100 000), token buckets of each API,
// 32 callers; it reports checks/s and the node's CPU per check (Linux):
//
//	go test -run '^$' -bench GubernatorAPI -benchtime 4s ./cmd/shardlimiter
func BenchmarkGubernatorAPI(b *testing.B) {
	bin := buildBinary(b)
	p := startProc(b, bin, "127.0.0.1", freeGossipPort(b, "127.0.0.1"), "", "--log-level", "error")
	conn, err := grpc.NewClient(p.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	native, err := dial.Dial(p.grpc)
	if err != nil {
		b.Fatal(err)
	}
	defer native.Close()
	gub := gubpb.NewV1Client(conn)
	key := func(n *atomic.Int64) string { return "k" + strconv.FormatInt(n.Add(1)%100_000, 10) }
	for _, batch := range []int{1, 100} {
		b.Run(fmt.Sprintf("native/batch%d", batch), func(b *testing.B) {
			var next atomic.Int64
			measure(b, p, batch, func(pb *testing.PB) {
				checks := make([]limit.Check, batch)
				for pb.Next() {
					for i := range checks {
						checks[i] = limit.Check{Name: "bench", Key: key(&next), Hits: 1,
							Rule: limit.Rule{Algorithm: limit.TokenBucket, Limit: 1_000_000, Period: time.Minute}}
					}
					if _, err := native.GetRateLimits(context.Background(), checks); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
		b.Run(fmt.Sprintf("gubernator/batch%d", batch), func(b *testing.B) {
			var next atomic.Int64
			measure(b, p, batch, func(pb *testing.PB) {
				req := &gubpb.GetRateLimitsReq{Requests: make([]*gubpb.RateLimitReq, batch)}
				for pb.Next() {
					for i := range req.Requests {
						req.Requests[i] = &gubpb.RateLimitReq{Name: "bench", UniqueKey: key(&next),
							Hits: 1, Limit: 1_000_000, Duration: 60_000}
					}
					if _, err := gub.GetRateLimits(context.Background(), req); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}

// measure runs body with 32 callers (16 per core on 2 cores) and reports
// checks/s and the node's CPU µs per check.
func measure(b *testing.B, p *proc, batch int, body func(pb *testing.PB)) {
	cpu0 := procCPU(p.cmd.Process.Pid)
	b.SetParallelism(16)
	b.ResetTimer()
	b.RunParallel(body)
	b.StopTimer()
	checks := float64(b.N * batch)
	b.ReportMetric(checks/b.Elapsed().Seconds(), "checks/s")
	if cpu1 := procCPU(p.cmd.Process.Pid); cpu0 >= 0 && cpu1 >= 0 {
		b.ReportMetric(float64(cpu1-cpu0)/float64(time.Microsecond)/checks, "node-cpu-µs/check")
	}
}

// procCPU returns the user+system CPU time of process pid, or -1 where
// /proc is not there.
func procCPU(pid int) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return -1
	}
	// the fields after the command name (in parentheses, may hold spaces)
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	if len(f) < 13 {
		return -1
	}
	utime, _ := strconv.ParseInt(f[11], 10, 64)
	stime, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(utime+stime) * time.Second / 100 // USER_HZ
}
