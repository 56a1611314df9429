package rlqs

import (
	"strings"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the service's series. The per-rule gauges are read from the
// owner's table at each scrape: their label values are the domains and
// rule names of the rlqs sections of the rules, so they are bounded by the
// rules files, never by what clients send.
type metrics struct {
	s               *Service
	refused         *prometheus.CounterVec
	reports         *prometheus.CounterVec
	full            prometheus.Counter
	abandoned       prometheus.Counter
	abandonedStream prometheus.Counter
	replicated      prometheus.Counter
	replicaErrors   prometheus.Counter
	streams         prometheus.GaugeFunc
	instances       *prometheus.Desc
	buckets         *prometheus.Desc
	assigned        *prometheus.Desc
	demand          *prometheus.Desc
}

func newMetrics(s *Service, reg prometheus.Registerer) *metrics {
	const ns, sub = "shardlimiter", "rlqs"
	perRule := []string{"domain", "rule"}
	m := &metrics{
		s: s,
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "streams_failed_total",
			Help: "RLQS streams ended with an error by this node, by reason: streams (over --rlqs-max-streams) or the gRPC code (InvalidArgument: no domain, a bad bucket_id; ResourceExhausted: over a bound)."}, []string{"reason"}),
		reports: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "bucket_reports_total",
			Help: "Bucket reports of this node's streams by route: local (owned here), forwarded (to the owner), owner_unreachable (the last assignment stands, then the default)."}, []string{"route"}),
		full: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "owner_full_total",
			Help: "Bucket reports this node, their owner, answered with the default because it owns too many buckets or the bucket has too many instances."}),
		abandoned: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "buckets_abandoned_total",
			Help: "Buckets this node owned and forgot because no instance reported on them for a TTL."}),
		abandonedStream: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "stream_buckets_abandoned_total",
			Help: "Buckets a stream stopped reporting on, sent an abandon_action."}),
		instances: prometheus.NewDesc(ns+"_"+sub+"_instances", "Instances (Envoy streams) that reported within a TTL on the buckets this node owns.", perRule, nil),
		buckets:   prometheus.NewDesc(ns+"_"+sub+"_buckets", "Quota buckets this node owns.", perRule, nil),
		assigned:  prometheus.NewDesc(ns+"_"+sub+"_assigned_rate", "Sum of the assignments still within their TTL on the buckets this node owns, requests per second.", perRule, nil),
		demand:    prometheus.NewDesc(ns+"_"+sub+"_demand_rate", "Sum of the smoothed demand (allowed + denied per second) reported on the buckets this node owns, requests per second.", perRule, nil),
	}
	m.replicated = prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "replicated_buckets_total",
		Help: "Buckets this node owns whose state it sent to their backup (the node that would own them next), every interval."})
	m.replicaErrors = prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "replication_errors_total",
		Help: "Calls sending bucket states to a backup that failed; the next interval sends them again."})
	m.streams = prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub, Name: "streams",
		Help: "RLQS streams open on this node."}, func() float64 { return float64(s.streams.Load()) })
	if reg != nil {
		reg.MustRegister(m.refused, m.reports, m.full, m.abandoned, m.abandonedStream, m.replicated, m.replicaErrors, m.streams, m)
	}
	return m
}

// Describe implements prometheus.Collector for the per-rule gauges.
func (m *metrics) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{m.instances, m.buckets, m.assigned, m.demand} {
		ch <- d
	}
}

// Collect implements prometheus.Collector: one read of the owner's table.
func (m *metrics) Collect(ch chan<- prometheus.Metric) {
	for g, st := range m.s.table.Stats(m.s.cfg.Now()) {
		domain, rule, _ := strings.Cut(g, "\x00")
		ch <- prometheus.MustNewConstMetric(m.instances, prometheus.GaugeValue, float64(st.Instances), domain, rule)
		ch <- prometheus.MustNewConstMetric(m.buckets, prometheus.GaugeValue, float64(st.Buckets), domain, rule)
		ch <- prometheus.MustNewConstMetric(m.assigned, prometheus.GaugeValue, st.Assigned, domain, rule)
		ch <- prometheus.MustNewConstMetric(m.demand, prometheus.GaugeValue, st.Demand, domain, rule)
	}
}
