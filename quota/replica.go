package quota

import (
	"math"
	"time"
)

// Replication: an owner hands its buckets' state to the node that would
// own them if it left (the caller sends them, every interval), so that a
// new owner after a crash counts the assignments the old one handed out
// until their TTL ends, and knows each instance's demand. Times travel as
// durations relative to the sender's now, never as timestamps.

// BucketState is one bucket as its owner replicates it.
type BucketState struct {
	Key       string          `json:"key"`
	Group     string          `json:"group"`
	Limit     float64         `json:"limit"`
	Instances []InstanceState `json:"instances"`
}

// InstanceState is one instance of a replicated bucket.
type InstanceState struct {
	ID string `json:"id"`
	// Demand is its smoothed demand, requests per second; -1: not known yet.
	Demand float64       `json:"demand"`
	Ago    time.Duration `json:"ago_ns"` // since its last report
	Leases []LeaseState  `json:"leases"`
}

// LeaseState is an assignment that may still be in use: its rate and the
// time left of its TTL.
type LeaseState struct {
	Rate float64       `json:"rate"`
	Left time.Duration `json:"left_ns"`
}

// Export calls fn with the state at now of every bucket reported on here
// (not the replicas this node holds). fn runs with the table's lock held:
// it must only copy.
func (t *Table) Export(now time.Time, fn func(BucketState)) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for key, b := range t.buckets {
		if b.replica {
			continue
		}
		bs := BucketState{Key: key, Group: b.group, Limit: b.limit, Instances: make([]InstanceState, 0, len(b.instances))}
		for id, in := range b.instances {
			is := InstanceState{ID: id, Demand: in.demand, Ago: now.Sub(in.seen)}
			if math.IsInf(in.demand, 1) {
				is.Demand = -1
			}
			for _, l := range append([]lease{in.current}, in.older...) {
				if l.live(now) > 0 {
					is.Leases = append(is.Leases, LeaseState{Rate: l.rate, Left: l.until.Sub(now)})
				}
			}
			bs.Instances = append(bs.Instances, is)
		}
		fn(bs)
	}
}

// Import takes a replicated bucket at now, unless this node reports on
// the bucket itself (it owns it already): a replica replaces the previous
// one. A replica nobody reports on is forgotten by Sweep once its
// assignments have ended; one reported on becomes the node's own, its
// assignments counted until their TTL ends.
func (t *Table) Import(now time.Time, s BucketState) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	b := t.buckets[s.Key]
	if b != nil && !b.replica {
		return nil
	}
	if b == nil && len(t.buckets) >= t.cfg.MaxBuckets {
		return ErrFull
	}
	b = &bucket{group: s.Group, limit: max(s.Limit, 0), replica: true, instances: map[string]*instance{}}
	for _, is := range s.Instances {
		if len(b.instances) >= t.cfg.MaxInstances {
			break
		}
		in := &instance{demand: is.Demand, seen: now.Add(-is.Ago)}
		if is.Demand < 0 || math.IsNaN(is.Demand) {
			in.demand = math.Inf(1)
		}
		for _, l := range is.Leases {
			if l.Left > 0 && l.Left <= 2*t.cfg.TTL+Slack && l.Rate >= 0 {
				in.older = append(in.older, lease{rate: l.Rate, until: now.Add(l.Left)})
			}
		}
		b.instances[is.ID] = in
	}
	t.buckets[s.Key] = b
	return nil
}
