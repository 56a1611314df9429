package transport

import (
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"

	"github.com/shardlimiter/shardlimiter/limit"
)

// Metrics holds the Prometheus collectors of the wire: RPC durations and
// batch sizes at the server boundary, per-item outcomes, and the peer
// client's forwarding. Series never carry a key, rule name or client id.
//
// Every per-item counter is bound to its labels at construction, so the hot
// path does no label lookup; histograms are observed once per RPC. A nil
// *Metrics is valid and records nothing. Metrics is safe for concurrent use;
// share one between the servers and every PeerClient of a node.
type Metrics struct {
	requestDuration *prometheus.HistogramVec // api, method, code
	okDuration      [numAPIs][numMethods]prometheus.Observer
	batchSize       [numAPIs][numMethods]prometheus.Observer
	checks          [numAlgorithmLabels][numOutcomes]prometheus.Counter
	itemErrors      [numReasonLabels]prometheus.Counter

	forwarded    prometheus.Counter
	forwardBatch prometheus.Observer
	peerDuration prometheus.Observer
	peerErrors   [numPeerErrors]prometheus.Counter

	sheds [numListeners][numShedResources]prometheus.Counter
}

// Listeners, for the shed metric; names as ListenerGRPC, ListenerHTTP,
// ListenerPeer.
const (
	listenerGRPC = iota
	listenerHTTP
	listenerPeer
	numListeners
)

// What a refused call did not get.
const (
	shedChecks    = iota // room under the in-flight bound (InFlight)
	shedBodyBytes        // room under the HTTP body-bytes bound
	numShedResources
)

var (
	listenerNames     = [numListeners]string{ListenerGRPC, ListenerHTTP, ListenerPeer}
	shedResourceNames = [numShedResources]string{"checks", "body_bytes"}
)

// Label values. Indexes into the pre-bound arrays.
const (
	apiGRPC = iota
	apiHTTP
	apiGubernatorGRPC // gubernator's API (gubernator.go)
	apiGubernatorHTTP // its HTTP gateway
	numAPIs
)

const (
	methodGet     = iota // GetRateLimits
	methodForward        // ForwardRateLimits
	numMethods
)

const (
	outcomeUnder = iota
	outcomeOver
	outcomeError
	outcomePeek // hits 0: answered, nothing taken
	numOutcomes
)

const (
	peerErrTimeout = iota
	peerErrUnavailable
	peerErrClosed
	peerErrOther
	peerErrOverloaded
	numPeerErrors
)

const (
	// numAlgorithmLabels covers every limit.Algorithm plus "unknown" (last),
	// for items whose algorithm did not convert.
	numAlgorithmLabels = int(limit.GubernatorLeakyBucket) + 2
	algorithmUnknown   = numAlgorithmLabels - 1
	numReasonLabels    = int(limit.NotOwner) + 1
)

var (
	apiNames     = [numAPIs]string{"grpc", "http", "gubernator_grpc", "gubernator_http"}
	methodNames  = [numMethods]string{"GetRateLimits", "ForwardRateLimits"}
	outcomeNames = [numOutcomes]string{"under_limit", "over_limit", "error", "peek"}
	peerErrNames = [numPeerErrors]string{"timeout", "unavailable", "closed", "other", "overloaded"}
)

// NewMetrics creates the collectors and registers them with reg. A nil reg
// registers nothing (the collectors still count, for tests). Registering
// twice with one registry panics, like prometheus.MustRegister.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{}
	m.requestDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: "shardlimiter", Subsystem: "server", Name: "request_duration_seconds",
		Help:    "Time to answer one RateLimiter or Peers call, by api (grpc, http; gubernator_grpc, gubernator_http: gubernator's API), method and status code.",
		Buckets: prometheus.ExponentialBuckets(50e-6, 2.5, 12), // 50µs … 1.2s
	}, []string{"api", "method", "code"})
	batch := prometheus.NewHistogramVec(prometheus.HistogramOpts{
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
	m.bindServer(batch, checks, itemErrors)

	m.forwarded = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: "shardlimiter", Subsystem: "peer", Name: "forwarded_checks_total",
		Help: "Checks accepted for forwarding to their owner.",
	})
	forwardBatch := prometheus.NewHistogram(prometheus.HistogramOpts{
		Namespace: "shardlimiter", Subsystem: "peer", Name: "forward_batch_size_items",
		Help:    "Checks per ForwardRateLimits RPC sent.",
		Buckets: batchBuckets,
	})
	peerDuration := prometheus.NewHistogram(prometheus.HistogramOpts{
		Namespace: "shardlimiter", Subsystem: "peer", Name: "rpc_duration_seconds",
		Help:    "Time of one ForwardRateLimits RPC, sent to its answer.",
		Buckets: prometheus.ExponentialBuckets(50e-6, 2.5, 12),
	})
	peerErrors := prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "shardlimiter", Subsystem: "peer", Name: "rpc_errors_total",
		Help: "Failed ForwardRateLimits RPCs, by reason (timeout, unavailable, closed, overloaded: the owner shed the call, other).",
	}, []string{"reason"})
	m.forwardBatch, m.peerDuration = forwardBatch, peerDuration
	for i, name := range peerErrNames {
		m.peerErrors[i] = peerErrors.WithLabelValues(name)
	}
	sheds := prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "shardlimiter", Subsystem: "transport", Name: "shed_total",
		Help: "Calls refused at once for overload (RESOURCE_EXHAUSTED / HTTP 429), by listener (grpc, http, peer) and resource: checks (the in-flight bound) or body_bytes (the HTTP request-body bound).",
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
		reg.MustRegister(m.requestDuration, batch, checks, itemErrors,
			m.forwarded, forwardBatch, peerDuration, peerErrors, sheds)
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

// bindServer pre-binds every server-side series, so that they exist at zero
// and the hot path indexes arrays instead of looking labels up.
func (m *Metrics) bindServer(batch *prometheus.HistogramVec, checks, itemErrors *prometheus.CounterVec) {
	for a := range numAPIs {
		for meth := range numMethods {
			if a != apiGRPC && meth == methodForward {
				continue // Peers is shardlimiter.v1 gRPC only
			}
			m.okDuration[a][meth] = m.requestDuration.WithLabelValues(apiNames[a], methodNames[meth], okCode(a))
			m.batchSize[a][meth] = batch.WithLabelValues(apiNames[a], methodNames[meth])
		}
	}
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

func okCode(api int) string {
	if api == apiHTTP || api == apiGubernatorHTTP {
		return "200"
	}
	return codes.OK.String()
}

// observeGRPC records one gRPC call of method answered with code.
func (m *Metrics) observeGRPC(method int, code codes.Code, items int, d time.Duration) {
	if m == nil {
		return
	}
	m.observe(apiGRPC, method, code == codes.OK, code.String, items, d)
}

// observeGRPCAPI records one GetRateLimits call of api answered with code.
func (m *Metrics) observeGRPCAPI(api int, code codes.Code, items int, d time.Duration) {
	if m == nil {
		return
	}
	m.observe(api, methodGet, code == codes.OK, code.String, items, d)
}

// observeHTTP records one HTTP call answered with status.
func (m *Metrics) observeHTTP(status int, items int, d time.Duration) {
	if m == nil {
		return
	}
	m.observe(apiHTTP, methodGet, status == 200, func() string { return strconv.Itoa(status) }, items, d)
}

// observe records a call; items < 0 means the batch was never decoded.
func (m *Metrics) observe(api, method int, ok bool, code func() string, items int, d time.Duration) {
	if ok {
		m.okDuration[api][method].Observe(d.Seconds())
	} else {
		m.requestDuration.WithLabelValues(apiNames[api], methodNames[method], code()).Observe(d.Seconds())
	}
	if items >= 0 {
		m.batchSize[api][method].Observe(float64(items))
	}
}

// tally counts one batch's outcomes on the stack; add publishes them with
// one atomic add per non-zero cell instead of one per item.
type tally struct {
	checks [numAlgorithmLabels][numOutcomes]uint32
	errors [numReasonLabels]uint32
}

// item counts one answered item; hits is the item's (0 is a peek).
func (t *tally) item(alg limit.Algorithm, hits int64, r *limit.Result) {
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

func (m *Metrics) add(t *tally) {
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

// forward records checks accepted by PeerClient.Forward.
func (m *Metrics) forward(items int) {
	if m == nil {
		return
	}
	m.forwarded.Add(float64(items))
}

// peerRPC records one ForwardRateLimits RPC; kind is a peerErr* index or -1.
func (m *Metrics) peerRPC(items int, d time.Duration, kind int) {
	if m == nil {
		return
	}
	m.forwardBatch.Observe(float64(items))
	m.peerDuration.Observe(d.Seconds())
	if kind >= 0 {
		m.peerErrors[kind].Inc()
	}
}
