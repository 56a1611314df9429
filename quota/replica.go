package quota

import (
	"math"
	"slices"
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
			bs.Instances = append(bs.Instances, in.export(now, id))
		}
		fn(bs)
	}
}

// ExportInstance returns, at now, the state of bucket key with only the
// instance id: what an owner replicates before answering the instance, so
// that the assignment it answers survives the owner (a delta: Import
// merges it). ok is false when the table holds no such bucket and
// instance of its own.
func (t *Table) ExportInstance(now time.Time, key, id string) (_ BucketState, ok bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	b := t.buckets[key]
	if b == nil || b.replica || b.instances[id] == nil {
		return BucketState{}, false
	}
	return BucketState{Key: key, Group: b.group, Limit: b.limit, Instances: []InstanceState{b.instances[id].export(now, id)}}, true
}

// export is the instance's state at now.
func (in *instance) export(now time.Time, id string) InstanceState {
	is := InstanceState{ID: id, Demand: in.demand, Ago: now.Sub(in.seen)}
	if math.IsInf(in.demand, 1) {
		is.Demand = -1
	}
	for _, l := range append([]lease{in.current}, in.older...) {
		if l.live(now) > 0 {
			is.Leases = append(is.Leases, LeaseState{Rate: l.rate, Left: l.until.Sub(now)})
		}
	}
	return is
}

// Import takes a replicated bucket at now and merges it into what the
// table holds of it: every assignment it lists is counted until its TTL
// ends, whether the bucket is a replica here or one this node reports on
// (an earlier owner's state reaching the new one after a join or a
// restart: its assignments may still be in use). A replica's instances
// take the state's demand when it is newer; a bucket reported on here
// keeps its own. A replica nobody reports on is forgotten by Sweep once
// its assignments have ended; one reported on becomes the node's own.
// Merging, not replacing, so that the delta an owner sends before an
// answer (ExportInstance) and its periodic full state may arrive in
// either order.
func (t *Table) Import(now time.Time, s BucketState) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	b := t.buckets[s.Key]
	if b == nil {
		if len(t.buckets) >= t.cfg.MaxBuckets {
			return ErrFull
		}
		b = &bucket{replica: true, instances: map[string]*instance{}}
		t.buckets[s.Key] = b
	}
	if b.replica {
		b.group, b.limit = s.Group, max(s.Limit, 0)
	}
	for _, is := range s.Instances {
		in := b.instances[is.ID]
		if in == nil {
			if len(b.instances) >= t.cfg.MaxInstances {
				continue
			}
			in = &instance{demand: math.Inf(1)}
			b.instances[is.ID] = in
		}
		if seen := now.Add(-is.Ago); seen.After(in.seen) && (b.replica || in.seen.IsZero()) {
			in.seen, in.demand = seen, is.Demand
			if is.Demand < 0 || math.IsNaN(is.Demand) {
				in.demand = math.Inf(1)
			}
		}
		for _, l := range is.Leases {
			if l.Left > 0 && l.Left <= 2*t.cfg.TTL+Slack && l.Rate >= 0 && !math.IsNaN(l.Rate) {
				in.count(now, lease{rate: l.Rate, until: now.Add(l.Left)})
			}
		}
	}
	return nil
}

// count counts l among the instance's assignments until it ends, unless
// one it counts already covers it (the same rate, as long or longer).
func (in *instance) count(now time.Time, l lease) {
	in.older = slices.DeleteFunc(in.older, func(o lease) bool { return o.live(now) == 0 })
	if in.current.rate == l.rate && !in.current.until.Before(l.until) {
		return
	}
	for i := range in.older {
		if in.older[i].rate == l.rate {
			in.older[i].until = maxTime(in.older[i].until, l.until)
			return
		}
	}
	in.older = append(in.older, l)
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
