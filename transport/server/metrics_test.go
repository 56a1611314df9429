package server

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"

	"github.com/shardlimiter/shardlimiter/limit"
	"github.com/shardlimiter/shardlimiter/transport/dial"
	"github.com/shardlimiter/shardlimiter/transport/wire"
)

// Names follow shardlimiter_<subsystem>_<name>_<unit>; no label can carry a
// key, rule name or client id.
func TestMetricNames(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewPedanticRegistry()
	m := NewMetrics(reg)
	dial.NewMetrics(reg) // the peer clients' series, named by the same rules
	m.Calls("grpc", "ForwardRateLimits", false).ObserveGRPC(codes.Unavailable, 1, time.Millisecond)
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
	var tl Tally
	tl.Item(limit.FixedWindow, 0, &limit.Result{Decision: limit.Decision{Allowed: true}})
	tl.Item(limit.FixedWindow, 0, &limit.Result{}) // a peek at a key over its limit
	tl.Item(limit.FixedWindow, 0, &limit.Result{Error: "x", Reason: limit.Invalid})
	tl.Item(limit.FixedWindow, 2, &limit.Result{Decision: limit.Decision{Allowed: true}})
	got := tl.checks[limit.FixedWindow]
	if got[outcomePeek] != 2 || got[outcomeError] != 1 || got[outcomeUnder] != 1 || got[outcomeOver] != 0 {
		t.Errorf("outcomes = %v (under, over, error, peek), want [1 0 1 2]", got)
	}
}

func TestMetricLabelsCoverLimit(t *testing.T) {
	t.Parallel()
	if n := len(limit.Algorithms()) + len(limit.GubernatorAlgorithms()) + 1; n != numAlgorithmLabels-1 { // + Cell
		t.Errorf("limit has %d algorithms, metrics %d", n, numAlgorithmLabels-1)
	}
	if n := len(limit.Reasons()); n != numReasonLabels {
		t.Errorf("limit has %d reasons, metrics %d", n, numReasonLabels)
	}
	var tl Tally
	tl.Item(wire.UnknownAlgorithm, 1, &limit.Result{Error: "x", Reason: limit.Invalid})
	if tl.checks[algorithmUnknown][outcomeError] != 1 {
		t.Errorf("an item of wire.UnknownAlgorithm is not counted as algorithm \"unknown\"")
	}
}

// A nil *Metrics and unregistered Metrics record without panicking.
func TestMetricsNil(t *testing.T) {
	t.Parallel()
	for _, m := range []*Metrics{nil, NewMetrics(nil)} {
		var tl Tally
		r := limit.Result{Error: "x", Reason: limit.Reason(200)}
		tl.Item(limit.Algorithm(77), 1, &r)
		m.Add(&tl)
		m.Calls("grpc", "GetRateLimits", false).ObserveGRPC(codes.OK, 3, time.Millisecond)
		m.Calls("http", "GetRateLimits", true).ObserveHTTP(413, -1, time.Millisecond)
		m.shed(listenerPeer, shedChecks)
	}
}
