package server

import (
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"

	"github.com/shardlimiter/shardlimiter/limit"
)

// Metrics holds the Prometheus collectors of the listeners: call durations
// and batch sizes at the server boundary, per-item outcomes and refusals
// for overload. Series never carry a key, rule name or client id.
//
// Every per-item counter is bound to its labels at construction, and each
// API binds its call series once when it registers ([Metrics.Calls]), so
// the hot path does no label lookup; histograms are observed once per
// call. A nil *Metrics is valid and records nothing. Metrics is safe for
// concurrent use; share one between a node's listeners.
type Metrics struct {
	requestDuration *prometheus.HistogramVec // api, method, code
	batchSize       *prometheus.HistogramVec // api, method
	checks          [numAlgorithmLabels][numOutcomes]prometheus.Counter
	itemErrors      [numReasonLabels]prometheus.Counter

	sheds [numListeners][numShedResources]prometheus.Counter
}

// Listeners, for the shed metric; names as ListenerGRPC, ListenerHTTP,
// ListenerPeer.
const (
	listenerGRPC = iota
	listenerHTTP
	listenerPeer
	listenerRESP
	numListeners
)

// What a refused call did not get.
const (
	shedChecks    = iota // room under the in-flight bound (InFlight)
	shedBodyBytes        // room under the HTTP body-bytes bound
	numShedResources
)

var (
	listenerNames     = [numListeners]string{ListenerGRPC, ListenerHTTP, ListenerPeer, ListenerRESP}
	shedResourceNames = [numShedResources]string{"checks", "body_bytes"}
)

const (
	outcomeUnder = iota
	outcomeOver
	outcomeError
	outcomePeek // hits 0: answered, nothing taken
	numOutcomes
)

const (
	// numAlgorithmLabels covers every limit.Algorithm plus "unknown" (last),
	// for items whose algorithm did not convert.
	numAlgorithmLabels = int(limit.MaxAlgorithm) + 2
	algorithmUnknown   = numAlgorithmLabels - 1
	numReasonLabels    = int(limit.NotOwner) + 1
)

var outcomeNames = [numOutcomes]string{"under_limit", "over_limit", "error", "peek"}

// NewMetrics creates the collectors and registers them with reg. A nil reg
// registers nothing (the collectors still count, for tests). Registering
// twice with one registry panics, like prometheus.MustRegister.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{}
	m.requestDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: "shardlimiter", Subsystem: "server", Name: "request_duration_seconds",
		Help:    "Time to answer one call of a batch API, by api (grpc, http; gubernator_grpc, gubernator_http: gubernator's API), method and status code.",
		Buckets: prometheus.ExponentialBuckets(50e-6, 2.5, 12), // 50µs … 1.2s
	}, []string{"api", "method", "code"})
	m.batchSize = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: "shardlimiter", Subsystem: "server", Name: "batch_size_items",
		Help:    "Checks per call received, by api and method.",
		Buckets: batchBuckets,
	}, []string{"api", "method"})
	checks := prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "shardlimiter", Subsystem: "server", Name: "checks_total",
		Help: "Checks answered, by algorithm and outcome (under_limit, over_limit, error, peek: hits 0, which takes nothing; a caller that only ever peeks is never limited).",
	}, []string{"algorithm", "outcome"})
	itemErrors := prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "shardlimiter", Subsystem: "server", Name: "item_errors_total",
		Help: "Checks answered with a per-item error, by reason.",
	}, []string{"reason"})
	m.bindItems(checks, itemErrors)
	sheds := prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "shardlimiter", Subsystem: "transport", Name: "shed_total",
		Help: "Calls refused at once for overload (RESOURCE_EXHAUSTED / HTTP 429), by listener (grpc, http, peer, resp) and resource: checks (the in-flight bound) or body_bytes (the HTTP request-body bound).",
	}, []string{"listener", "resource"})
	for l, ln := range listenerNames {
		for r, rn := range shedResourceNames {
			if r == shedBodyBytes && l != listenerHTTP {
				continue
			}
			m.sheds[l][r] = sheds.WithLabelValues(ln, rn)
		}
	}
	if reg != nil {
		reg.MustRegister(m.requestDuration, m.batchSize, checks, itemErrors, sheds)
	}
	return m
}

// shed counts a call refused for want of resource on listener.
func (m *Metrics) shed(listener, resource int) {
	if m == nil {
		return
	}
	m.sheds[listener][resource].Inc()
}

// RegisterInFlight exports the node's bounds as gauges read at scrape time
// (nothing on the hot path): checks in flight and their bound, by pool
// (client: the client gRPC and HTTP calls; peer: forwarded checks and
// state moves), and HTTP request-body bytes being read. Nil bounds are
// exported as 0.
func RegisterInFlight(reg prometheus.Registerer, client, peer, bodyBytes *InFlight) {
	for _, p := range []struct {
		pool string
		b    *InFlight
	}{{"client", client}, {"peer", peer}} {
		labels := prometheus.Labels{"pool": p.pool}
		reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: "shardlimiter", Subsystem: "transport", Name: "inflight_checks", ConstLabels: labels,
			Help: "Checks being decided now, by pool: client (client gRPC and HTTP) or peer (forwarded checks, state keys).",
		}, func() float64 { return float64(p.b.InUse()) }))
		reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: "shardlimiter", Subsystem: "transport", Name: "max_inflight_checks", ConstLabels: labels,
			Help: "The bound on checks in flight, by pool (--max-inflight, --max-peer-inflight); 0 = none.",
		}, func() float64 { return float64(p.b.Limit()) }))
	}
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Namespace: "shardlimiter", Subsystem: "transport", Name: "inflight_holders",
		Help: "Parties the client pool's bound is shared between now: open gRPC connections that made a call, HTTP client addresses with calls in flight (0 without fair sharing).",
	}, func() float64 { return float64(client.Holders()) }))
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Namespace: "shardlimiter", Subsystem: "transport", Name: "inflight_body_bytes",
		Help: "HTTP request-body bytes reserved by requests being read now (bounded by the body-bytes budget).",
	}, func() float64 { return float64(bodyBytes.InUse()) }))
}

var batchBuckets = []float64{1, 2, 5, 10, 20, 50, 100, 200, 500, 1000}

// bindItems pre-binds the per-item series, so that they exist at zero and
// the hot path indexes arrays instead of looking labels up.
func (m *Metrics) bindItems(checks, itemErrors *prometheus.CounterVec) {
	for a := range numAlgorithmLabels {
		name := "unknown"
		if a != algorithmUnknown {
			name = limit.Algorithm(a).String()
		}
		for o, outcome := range outcomeNames {
			m.checks[a][o] = checks.WithLabelValues(name, outcome)
		}
	}
	for r := range numReasonLabels {
		m.itemErrors[r] = itemErrors.WithLabelValues(limit.Reason(r).String())
	}
}

// Calls are the series of one method of one API, bound when the API
// registers: its answered calls' durations and batch sizes. A nil *Calls
// records nothing.
type Calls struct {
	m      *Metrics
	api    string
	method string
	http   bool // codes are HTTP statuses, else gRPC codes
	ok     prometheus.Observer
	batch  prometheus.Observer
}

// Calls binds the series of method of api ("grpc", "http",
// "gubernator_grpc", …: the api label). With http, the codes it observes
// are HTTP statuses ("200"), else gRPC codes ("OK"). On a nil m it returns
// nil.
func (m *Metrics) Calls(api, method string, http bool) *Calls {
	if m == nil {
		return nil
	}
	ok := codes.OK.String()
	if http {
		ok = "200"
	}
	return &Calls{m: m, api: api, method: method, http: http,
		ok:    m.requestDuration.WithLabelValues(api, method, ok),
		batch: m.batchSize.WithLabelValues(api, method)}
}

// ObserveGRPC records one call answered with code, of items checks (< 0:
// the batch was never decoded), that took d.
func (c *Calls) ObserveGRPC(code codes.Code, items int, d time.Duration) {
	if c == nil {
		return
	}
	c.observe(code == codes.OK, code.String, items, d)
}

// ObserveHTTP records one call answered with status.
func (c *Calls) ObserveHTTP(status int, items int, d time.Duration) {
	if c == nil {
		return
	}
	c.observe(status == 200, func() string { return strconv.Itoa(status) }, items, d)
}

// ObserveCode records one call of a protocol with codes of its own (the
// Redis protocol's: "OK", or the error's first word) of items checks.
func (c *Calls) ObserveCode(code string, items int, d time.Duration) {
	if c == nil {
		return
	}
	c.observe(code == "OK", func() string { return code }, items, d)
}

func (c *Calls) observe(ok bool, code func() string, items int, d time.Duration) {
	if ok {
		c.ok.Observe(d.Seconds())
	} else {
		c.m.requestDuration.WithLabelValues(c.api, c.method, code()).Observe(d.Seconds())
	}
	if items >= 0 {
		c.batch.Observe(float64(items))
	}
}

// Tally counts one batch's outcomes on the stack; Add publishes them with
// one atomic add per non-zero cell instead of one per item.
type Tally struct {
	checks [numAlgorithmLabels][numOutcomes]uint32
	errors [numReasonLabels]uint32
}

// Item counts one answered item; hits is the item's (0 is a peek).
func (t *Tally) Item(alg limit.Algorithm, hits int64, r *limit.Result) {
	a := int(alg)
	if a >= algorithmUnknown {
		a = algorithmUnknown
	}
	switch {
	case r.Error == "" && hits == 0:
		t.checks[a][outcomePeek]++
	case r.Error != "":
		t.checks[a][outcomeError]++
		reason := int(r.Reason)
		if reason == int(limit.OK) || reason >= numReasonLabels {
			reason = int(limit.Internal)
		}
		t.errors[reason]++
	case r.Allowed:
		t.checks[a][outcomeUnder]++
	default:
		t.checks[a][outcomeOver]++
	}
}

// Add publishes t.
func (m *Metrics) Add(t *Tally) {
	if m == nil {
		return
	}
	for a := range t.checks {
		for o, n := range t.checks[a] {
			if n != 0 {
				m.checks[a][o].Add(float64(n))
			}
		}
	}
	for r, n := range t.errors {
		if n != 0 {
			m.itemErrors[r].Add(float64(n))
		}
	}
}
