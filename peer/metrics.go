package peer

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/shardlimiter/shardlimiter/limit"
)

// metrics are the node's Prometheus series. All counters on the check path
// are bound at construction: no label lookup per check.
type metrics struct {
	fallback     [len(policyNames)]prometheus.Counter // by policy
	ringMembers  prometheus.Gauge
	ringRebuilds prometheus.Counter
	swept        prometheus.Counter
}

func newMetrics(reg prometheus.Registerer, n *Node) *metrics {
	fallback := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "shardlimiter_peer_fallback_decisions_total",
		Help: "Checks decided by the fail policy because their owner could not be reached, by policy.",
	}, []string{"policy"})
	m := &metrics{
		ringMembers: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "shardlimiter_ring_members",
			Help: "Members in this node's current ring snapshot.",
		}),
		ringRebuilds: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "shardlimiter_ring_rebuilds_total",
			Help: "Ring snapshots built after membership changes.",
		}),
		swept: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "shardlimiter_table_swept_keys_total",
			Help: "Idle keys removed by the background sweep.",
		}),
	}
	for i, name := range policyNames {
		m.fallback[i] = fallback.WithLabelValues(name)
	}
	if reg == nil {
		return m
	}
	reg.MustRegister(fallback, m.ringMembers, m.ringRebuilds, m.swept,
		tableCollector{n: n})
	return m
}

// tableCollector reports the tables' live keys and evictions at scrape
// time, so the check path pays nothing for them.
type tableCollector struct{ n *Node }

var (
	keysDesc = prometheus.NewDesc("shardlimiter_table_keys",
		"Keys held in memory, by algorithm.", []string{"algorithm"}, nil)
	evictedDesc = prometheus.NewDesc("shardlimiter_table_evictions_total",
		"Keys evicted (least recently used) to respect --max-keys, by algorithm.", []string{"algorithm"}, nil)
)

func (c tableCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- keysDesc
	ch <- evictedDesc
}

func (c tableCollector) Collect(ch chan<- prometheus.Metric) {
	for _, a := range limit.Algorithms() {
		l := c.n.limiters[a]
		ch <- prometheus.MustNewConstMetric(keysDesc, prometheus.GaugeValue, float64(l.Len()), a.String())
		ch <- prometheus.MustNewConstMetric(evictedDesc, prometheus.CounterValue, float64(l.Evicted()), a.String())
	}
}
