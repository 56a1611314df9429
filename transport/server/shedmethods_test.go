package server

import (
	"context"
	"testing"

	"github.com/shardlimiter/shardlimiter/transport"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/emptypb"
)

// pingDesc is a service an API registers: two methods that echo an
// Empty. Only the first is registered with Shed.
var pingDesc = grpc.ServiceDesc{
	ServiceName: "test.Ping",
	HandlerType: (*any)(nil),
	Methods:     []grpc.MethodDesc{{MethodName: "Bounded", Handler: echoEmpty}, {MethodName: "Free", Handler: echoEmpty}},
}

const (
	pingBounded = "/test.Ping/Bounded"
	pingFree    = "/test.Ping/Free"
)

func echoEmpty(_ any, _ context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
	in := new(emptypb.Empty)
	if err := dec(in); err != nil {
		return nil, err
	}
	return in, nil
}

// TestGRPCShedMethods: while the bound is full, a method registered with
// Shed is refused at its headers with ResourceExhausted and a retry
// delay, counted as a shed of the client listener; a method of the same
// service not named is served; once there is room, the named one is too.
func TestGRPCShedMethods(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	bound := NewInFlight(10)
	_, target, dialer := startGRPC(t, testConfig{
		Register: func(l *Listener) { l.Register(&pingDesc, struct{}{}, Shed("Bounded")) },
		Metrics:  NewMetrics(reg),
		InFlight: bound,
	})
	conn := dialConn(t, target, dialer)
	call := func(method string) error {
		return conn.Invoke(ctxTimeout(t), method, &emptypb.Empty{}, new(emptypb.Empty))
	}
	if err := call(pingBounded); err != nil {
		t.Fatalf("%s with the bound free = %v", pingBounded, err)
	}
	if !bound.TryAcquire(10) {
		t.Fatal("TryAcquire(10) on an idle bound failed")
	}
	err := call(pingBounded)
	if d, ok := transport.RetryDelay(err); !transport.IsShed(err) || !ok || d != transport.ShedRetryDelay {
		t.Fatalf("%s with the bound full = %v (retry delay %v, %v), want ResourceExhausted with %v", pingBounded, err, d, ok, transport.ShedRetryDelay)
	}
	if v, _ := sample(t, reg, "shardlimiter_transport_shed_total", "listener", "grpc", "resource", "checks"); v != 1 {
		t.Errorf("shed_total{grpc,checks} = %v, want 1", v)
	}
	if err := call(pingFree); err != nil {
		t.Errorf("%s (not registered with Shed) with the bound full = %v, want it served", pingFree, err)
	}
	bound.Release(10)
	if err := call(pingBounded); err != nil {
		t.Fatalf("%s once the bound is free = %v", pingBounded, err)
	}
}
