package peer

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/shardlimiter/shardlimiter/limit"
	"github.com/shardlimiter/shardlimiter/peer/rulemetrics"
)

// metrics are the node's Prometheus series. All counters on the check path
// are bound at construction: no label lookup per check.
type metrics struct {
	fallback     [len(policyNames)]prometheus.Counter // by policy
	ringMembers  prometheus.Gauge
	ringRebuilds prometheus.Counter
	swept        prometheus.Counter

	transferSent       [3]prometheus.Counter // by limit.Transfer
	transferReceived   [3]prometheus.Counter // by limit.Transfer
	transferMalformed  prometheus.Counter
	handoffIncomplete  prometheus.Counter
	replicaFallbacks   prometheus.Counter
	handoffWait        prometheus.Observer
	replicationRound   prometheus.Observer
	replicationErrors  prometheus.Counter
	replicationDropped prometheus.Counter
	replicaMoved       prometheus.Counter
	standin            prometheus.Counter
	notOwner           prometheus.Counter
	redirects          prometheus.Counter
	rules              *rulemetrics.Metrics

	// Leases (lease.go, leasehold.go).
	leaseGranted   prometheus.Counter // owner: grants made
	leaseReleased  prometheus.Counter // owner: releases credited against a grant
	leaseDenied    prometheus.Counter // owner: deny leases given
	leaseRenewed   prometheus.Counter // lessee: grants received while holding one
	leaseExpired   prometheus.Counter // lessee: leases that ended at their expiry
	leaseDecisions prometheus.Counter // lessee: checks decided from a lease
}

func newMetrics(reg prometheus.Registerer, n *Node, maxRules int) *metrics {
	fallback := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "shardlimiter_peer_fallback_decisions_total",
		Help: "Checks decided by the fail policy because their owner could not be reached (or this node had not joined its cluster yet), by policy.",
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
	moving := m.initMoving()
	m.standin = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "shardlimiter_peer_standin_decisions_total",
		Help: "Checks decided from a replica because their owner could not be reached.",
	})
	m.notOwner = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "shardlimiter_peer_not_owner_total",
		Help: "Forwarded checks refused because this node does not own their key (the sender routes them again).",
	})
	m.redirects = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "shardlimiter_peer_redirects_total",
		Help: "Checks sent on to the owner another node named after it refused them.",
	})
	m.rules = rulemetrics.New(maxRules)
	leases := m.initLeases(n)
	if reg == nil {
		return m
	}
	reg.MustRegister(leases...)
	reg.MustRegister(m.rules.Collectors()...)
	reg.MustRegister(moving...)
	reg.MustRegister(fallback, m.ringMembers, m.ringRebuilds, m.swept,
		tableCollector{n: n}, m.standin, m.notOwner, m.redirects, handoffCollector{n: n})
	return m
}

// initMoving makes the series of the state mover (transfers, handoff,
// replication) and returns them for registration.
func (m *metrics) initMoving() []prometheus.Collector {
	sent := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "shardlimiter_state_keys_sent_total",
		Help: "Key states sent to other nodes, by transfer (replica: replication; join, leave: handoff on a membership change).",
	}, []string{"transfer"})
	received := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "shardlimiter_state_keys_received_total",
		Help: "Key states received from other nodes and merged, by transfer.",
	}, []string{"transfer"})
	for _, t := range limit.Transfers() {
		m.transferSent[t] = sent.WithLabelValues(t.String())
		m.transferReceived[t] = received.WithLabelValues(t.String())
	}
	m.transferMalformed = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "shardlimiter_state_keys_refused_total",
		Help: "Key states received that did not decode and were dropped.",
	})
	m.handoffIncomplete = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "shardlimiter_handoff_incomplete_total",
		Help: "Handoffs given up, keys decided without the state their old owner held: a pull that failed with no replica to fall back to, a push that failed while other members were left, a check that stopped waiting for its partition's state, a leave whose handoff was not acknowledged before the deadline.",
	})
	m.replicaFallbacks = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "shardlimiter_handoff_replica_fallbacks_total",
		Help: "Pulls whose old owner did not answer (it crashed) and that took the partitions' replica instead, from its holder or held here: the state lags the old owner by at most one replication interval; and restarts from a snapshot that decide, from the replicas restored, partitions of members not back since every node stopped.",
	})
	handoffWait := prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "shardlimiter_handoff_wait_seconds",
		Help:    "How long a batch waited for the state of a partition this node had just gained.",
		Buckets: prometheus.ExponentialBuckets(0.0005, 4, 8),
	})
	m.handoffWait = handoffWait
	round := prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "shardlimiter_replication_round_seconds",
		Help:    "Time to send one round of changed keys to their replica holders: with the interval, the replication lag.",
		Buckets: prometheus.ExponentialBuckets(0.0005, 4, 8),
	})
	m.replicationRound = round
	m.replicationErrors = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "shardlimiter_replication_errors_total",
		Help: "Replication sends that failed (their keys are sent again on their next change).",
	})
	m.replicationDropped = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "shardlimiter_replication_dropped_keys_total",
		Help: "Changed keys not replicated because their destination's backlog was full.",
	})
	m.replicaMoved = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "shardlimiter_replication_moved_keys_total",
		Help: "Keys sent to a new replica holder, changed or not, after a ring change moved their replica but not their owner (not counted in shardlimiter_state_keys_sent_total).",
	})
	return []prometheus.Collector{sent, received, m.transferMalformed, m.handoffIncomplete, m.replicaFallbacks,
		handoffWait, round, m.replicationErrors, m.replicationDropped, m.replicaMoved}
}

// tableCollector reports the tables' live keys and evictions at scrape
// time, so the check path pays nothing for them.
type tableCollector struct{ n *Node }

var (
	keysDesc = prometheus.NewDesc("shardlimiter_table_keys",
		"Keys held in memory, by algorithm.", []string{"algorithm"}, nil)
	evictedDesc = prometheus.NewDesc("shardlimiter_table_evictions_total",
		"Keys evicted (least recently used), by algorithm and cause: keys (the table's --max-keys) or bytes (the node's --max-memory).", []string{"algorithm", "cause"}, nil)
	bytesDesc = prometheus.NewDesc("shardlimiter_table_bytes",
		"Bytes the keys of a table are charged for (key, entry, state): an estimate of their heap, by algorithm.", []string{"algorithm"}, nil)
	budgetDesc = prometheus.NewDesc("shardlimiter_table_budget_bytes",
		"The bytes all tables together may hold (a share of --max-memory); 0 when unbounded.", nil, nil)
)

func (c tableCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- keysDesc
	ch <- evictedDesc
	ch <- bytesDesc
	ch <- budgetDesc
}

func (c tableCollector) Collect(ch chan<- prometheus.Metric) {
	// The gubernator algorithms share one table, reported under the first.
	for _, a := range append(limit.Algorithms(), limit.GubernatorTokenBucket, limit.Cell) {
		l := c.n.limiters[a]
		ch <- prometheus.MustNewConstMetric(keysDesc, prometheus.GaugeValue, float64(l.Len()), a.String())
		ch <- prometheus.MustNewConstMetric(evictedDesc, prometheus.CounterValue, float64(l.Evicted()), a.String(), "keys")
		ch <- prometheus.MustNewConstMetric(evictedDesc, prometheus.CounterValue, float64(l.EvictedForBytes()), a.String(), "bytes")
		ch <- prometheus.MustNewConstMetric(bytesDesc, prometheus.GaugeValue, float64(l.Bytes()), a.String())
	}
	ch <- prometheus.MustNewConstMetric(budgetDesc, prometheus.GaugeValue, float64(c.n.Memory().Budget))
}

// handoffCollector reports the partitions marked for handoff at scrape time.
type handoffCollector struct{ n *Node }

var partitionsDesc = prometheus.NewDesc("shardlimiter_handoff_partitions",
	"Ring partitions marked for handoff on this node, by mark (incoming: state awaited; moved: handed to another node; received: handed here before the ring said so).",
	[]string{"mark"}, nil)

func (c handoffCollector) Describe(ch chan<- *prometheus.Desc) { ch <- partitionsDesc }

func (c handoffCollector) Collect(ch chan<- prometheus.Metric) {
	counts := c.n.ho.counts()
	for _, k := range partKindNames[1:] {
		ch <- prometheus.MustNewConstMetric(partitionsDesc, prometheus.GaugeValue, float64(counts[k]), k)
	}
}

// initLeases makes the series of leases (lease.go, leasehold.go) and
// returns them for registration.
func (m *metrics) initLeases(n *Node) []prometheus.Collector {
	counter := func(name, help string) prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{Name: "shardlimiter_lease_" + name, Help: help})
	}
	m.leaseGranted = counter("granted_total", "Leases this node granted of keys it owns (each debited from the key).")
	m.leaseReleased = counter("released_total", "Leases ended by their lessee whose unused hits this node credited back.")
	m.leaseDenied = counter("denied_total", "Deny leases this node gave: a key over its limit, refused by the lessee until it has room again.")
	m.leaseRenewed = counter("renewed_total", "Grants this node received while it still held a lease of the key.")
	m.leaseExpired = counter("expired_total", "Leases held by this node that ended at their expiry (what was left given back).")
	m.leaseDecisions = counter("decisions_total", "Checks this node decided from a lease or a deny lease instead of forwarding them.")
	granted := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "shardlimiter_lease_granted_hits",
		Help: "Hits of keys this node owns held in leases it granted that have not ended.",
	}, func() float64 { return float64(n.mv.leases.heldHits(n.cfg.Now().UnixNano())) })
	held := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "shardlimiter_lease_held_hits",
		Help: "Hits this node holds in leases of keys other nodes own.",
	}, func() float64 {
		if n.lh == nil {
			return 0
		}
		return float64(n.lh.held.Load())
	})
	return []prometheus.Collector{m.leaseGranted, m.leaseReleased, m.leaseDenied, m.leaseRenewed, m.leaseExpired, m.leaseDecisions, granted, held}
}
