package transport

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"

	"github.com/shardlimiter/shardlimiter/limit"
	"github.com/shardlimiter/shardlimiter/transport/internal/wire"
	"github.com/shardlimiter/shardlimiter/transport/pb"
)

// sample finds name{labels…} in reg and returns its counter value or, for a
// histogram, its sample count and sum.
func sample(t testing.TB, reg *prometheus.Registry, name string, labels ...string) (value, sum float64) {
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

func TestMetricsAtTheBoundary(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewPedanticRegistry()
	m := NewMetrics(reg)
	_, target, dialer := startGRPC(t, GRPCConfig{Checker: &fakeChecker{owner: "a"}, Metrics: m, MaxBatch: 5})
	rpc := pb.NewRateLimiterClient(dialConn(t, target, dialer))
	reqs := []*pb.RateLimitRequest{wireReq("a", 1, nil), wireReq("b", 20, nil),
		wireReq("c", 1, func(r *pb.RateLimitRequest) { r.DurationMs = 0 }),
		wireReq("d", 1, func(r *pb.RateLimitRequest) { r.Algorithm = 42 }),
		wireReq("e", 0, nil)} // a peek
	if _, err := rpc.GetRateLimits(ctxTimeout(t), &pb.GetRateLimitsRequest{Requests: reqs}); err != nil {
		t.Fatalf("GetRateLimits = %v", err)
	}
	_, _ = rpc.GetRateLimits(ctxTimeout(t), &pb.GetRateLimitsRequest{Requests: append(reqs, reqs...)}) // over MaxBatch
	srv := startHTTP(t, HTTPConfig{Checker: &fakeChecker{}, Telemetry: m})
	do(t, srv, http.MethodPost, "/v1/GetRateLimits", `{"requests":[{"limit":"5"}]}`) // no duration_ms
	do(t, srv, http.MethodPost, "/v1/GetRateLimits", `{`)

	tests := []struct {
		name   string
		labels []string
		want   float64
		sum    float64 // histograms only
	}{
		{"shardlimiter_server_checks_total", []string{"algorithm", "TOKEN_BUCKET", "outcome", "under_limit"}, 1, 0},
		{"shardlimiter_server_checks_total", []string{"algorithm", "TOKEN_BUCKET", "outcome", "peek"}, 1, 0},
		{"shardlimiter_server_checks_total", []string{"algorithm", "FIXED_WINDOW", "outcome", "peek"}, 0, 0},
		{"shardlimiter_server_checks_total", []string{"algorithm", "TOKEN_BUCKET", "outcome", "over_limit"}, 1, 0},
		{"shardlimiter_server_checks_total", []string{"algorithm", "TOKEN_BUCKET", "outcome", "error"}, 2, 0}, // gRPC c + HTTP {"limit":"5"}
		{"shardlimiter_server_checks_total", []string{"algorithm", "unknown", "outcome", "error"}, 1, 0},
		{"shardlimiter_server_checks_total", []string{"algorithm", "SLIDING_LOG", "outcome", "under_limit"}, 0, 0},
		{"shardlimiter_server_item_errors_total", []string{"reason", "invalid_argument"}, 3, 0},
		{"shardlimiter_server_item_errors_total", []string{"reason", "unavailable"}, 0, 0},
		{"shardlimiter_server_request_duration_seconds", []string{"api", "grpc", "method", "GetRateLimits", "code", "OK"}, 1, -1},
		{"shardlimiter_server_request_duration_seconds", []string{"api", "grpc", "method", "GetRateLimits", "code", codes.InvalidArgument.String()}, 1, -1},
		{"shardlimiter_server_request_duration_seconds", []string{"api", "http", "code", "200"}, 1, -1},
		{"shardlimiter_server_request_duration_seconds", []string{"api", "http", "code", "400"}, 1, -1},
		{"shardlimiter_server_batch_size_items", []string{"api", "grpc", "method", "GetRateLimits"}, 2, 15},
		{"shardlimiter_server_batch_size_items", []string{"api", "http"}, 1, 1},
	}
	for _, tt := range tests {
		got, sum := sample(t, reg, tt.name, tt.labels...)
		if got != tt.want || (tt.sum >= 0 && sum != tt.sum) {
			t.Errorf("%s%v = %v (sum %v), want %v (sum %v)", tt.name, tt.labels, got, sum, tt.want, tt.sum)
		}
	}
}

// Names follow shardlimiter_<subsystem>_<name>_<unit>; no label can carry a
// key, rule name or client id.
func TestMetricNames(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewPedanticRegistry()
	m := NewMetrics(reg)
	m.peerRPC(1, time.Millisecond, peerErrOther)
	m.forward(1)
	m.observeGRPC(methodForward, codes.Unavailable, 1, time.Millisecond)
	m.shed(listenerHTTP, shedBodyBytes)
	RegisterInFlight(reg, NewInFlight(10), nil, NewInFlight(100))
	families, err := reg.Gather()
	if err != nil {
		t.Fatalf("Gather = %v", err)
	}
	allowedLabels := map[string]bool{"api": true, "method": true, "code": true, "algorithm": true, "outcome": true, "reason": true,
		"listener": true, "resource": true, "pool": true}
	for _, f := range families {
		name := f.GetName()
		if !strings.HasPrefix(name, "shardlimiter_server_") && !strings.HasPrefix(name, "shardlimiter_peer_") &&
			!strings.HasPrefix(name, "shardlimiter_transport_") {
			t.Errorf("metric %s: want prefix shardlimiter_server_, shardlimiter_peer_ or shardlimiter_transport_", name)
		}
		switch f.GetType().String() {
		case "COUNTER":
			if !strings.HasSuffix(name, "_total") {
				t.Errorf("counter %s: want suffix _total", name)
			}
		case "HISTOGRAM":
			if !strings.HasSuffix(name, "_seconds") && !strings.HasSuffix(name, "_items") {
				t.Errorf("histogram %s: want a unit suffix _seconds or _items", name)
			}
		}
		for _, mt := range f.GetMetric() {
			for _, l := range mt.GetLabel() {
				if !allowedLabels[l.GetName()] {
					t.Errorf("metric %s has label %q, want only bounded labels", name, l.GetName())
				}
			}
		}
	}
}

// The pre-bound series cover every algorithm of limit plus "unknown", and
// every reason.
// A peek (hits 0) is counted apart from the checks that take, so that a
// dashboard shows a caller that never takes anything; a peek that fails is
// an error like any other item.
func TestPeeksCountedApart(t *testing.T) {
	t.Parallel()
	var tl tally
	tl.item(limit.FixedWindow, 0, &limit.Result{Decision: limit.Decision{Allowed: true}})
	tl.item(limit.FixedWindow, 0, &limit.Result{}) // a peek at a key over its limit
	tl.item(limit.FixedWindow, 0, &limit.Result{Error: "x", Reason: limit.Invalid})
	tl.item(limit.FixedWindow, 2, &limit.Result{Decision: limit.Decision{Allowed: true}})
	got := tl.checks[limit.FixedWindow]
	if got[outcomePeek] != 2 || got[outcomeError] != 1 || got[outcomeUnder] != 1 || got[outcomeOver] != 0 {
		t.Errorf("outcomes = %v (under, over, error, peek), want [1 0 1 2]", got)
	}
}

func TestMetricLabelsCoverLimit(t *testing.T) {
	t.Parallel()
	if n := len(limit.Algorithms()) + len(limit.GubernatorAlgorithms()); n != numAlgorithmLabels-1 {
		t.Errorf("limit has %d algorithms, metrics %d", n, numAlgorithmLabels-1)
	}
	if n := len(limit.Reasons()); n != numReasonLabels {
		t.Errorf("limit has %d reasons, metrics %d", n, numReasonLabels)
	}
	var tl tally
	tl.item(wire.UnknownAlgorithm, 1, &limit.Result{Error: "x", Reason: limit.Invalid})
	if tl.checks[algorithmUnknown][outcomeError] != 1 {
		t.Errorf("an item of wire.UnknownAlgorithm is not counted as algorithm \"unknown\"")
	}
}

// A nil *Metrics and unregistered Metrics record without panicking.
func TestMetricsNil(t *testing.T) {
	t.Parallel()
	for _, m := range []*Metrics{nil, NewMetrics(nil)} {
		var tl tally
		r := limit.Result{Error: "x", Reason: limit.Reason(200)}
		tl.item(limit.Algorithm(77), 1, &r)
		m.add(&tl)
		m.observeGRPC(methodGet, codes.OK, 3, time.Millisecond)
		m.observeHTTP(413, -1, time.Millisecond)
		m.forward(3)
		m.peerRPC(3, time.Millisecond, -1)
	}
}
