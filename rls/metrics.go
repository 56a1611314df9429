package rls

import "github.com/prometheus/client_golang/prometheus"

// Descriptor results, the values of the result label.
const (
	resultUnderLimit = iota
	resultOverLimit
	resultShadow
	resultNoRule
	resultUnlimited
	resultReplaced
	numResults
)

var resultNames = [numResults]string{"under_limit", "over_limit", "shadow_over_limit", "no_rule", "unlimited", "replaced"}

// metrics are the service's counters, bound once.
type metrics struct {
	requests    prometheus.Counter
	errors      prometheus.Counter
	nodeShadow  prometheus.Counter
	descriptors [numResults]prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		requests: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "shardlimiter", Subsystem: "rls", Name: "requests_total",
			Help: "ShouldRateLimit calls (gRPC and POST /json).",
		}),
		errors: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "shardlimiter", Subsystem: "rls", Name: "errors_total",
			Help: "ShouldRateLimit calls answered with an error (malformed request, owner unreachable under a fail-closed policy, shutting down).",
		}),
		nodeShadow: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "shardlimiter", Subsystem: "rls", Name: "shadow_mode_total",
			Help: "ShouldRateLimit calls that were OVER_LIMIT and answered OK because the node is in shadow mode (--shadow-mode).",
		}),
	}
	vec := prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "shardlimiter", Subsystem: "rls", Name: "descriptors_total",
		Help: "Descriptors answered, by result: under_limit, over_limit, shadow_over_limit (over the limit, answered OK: the rule is in shadow mode), no_rule (no rule matched or unknown domain), unlimited, replaced.",
	}, []string{"result"})
	for i, name := range resultNames {
		m.descriptors[i] = vec.WithLabelValues(name)
	}
	if reg != nil {
		reg.MustRegister(m.requests, m.errors, m.nodeShadow, vec)
	}
	return m
}
