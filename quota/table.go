package quota

import (
	"errors"
	"math"
	"slices"
	"sync"
	"time"
)

// ErrFull is returned by Report when the table holds MaxBuckets buckets
// and the report is for a new one, or the bucket holds MaxInstances
// instances and the report is from a new one.
var ErrFull = errors.New("quota: too many buckets or instances")

// Defaults of Config.
const (
	DefaultInterval     = 5 * time.Second
	DefaultMaxBuckets   = 100_000
	DefaultMaxInstances = 1_000
)

// rise is how much of the gap to a higher demand sample the smoothed
// demand closes per report. A lower sample is taken at once: capacity an
// instance no longer uses reaches the others after one TTL, which is what
// bounds convergence after a shift (a shift converges in about three
// reports: the report that shows it, a TTL of two intervals for the old
// assignment to end). A rise is smoothed, so that one busy interval does
// not claim a share the instance will not use; it costs little, as a
// large rise passes the equal share at the first report anyway.
const rise = 0.5

// hysteresis is the relative change of an instance's share below which
// its assignment is kept as it is.
const hysteresis = 0.05

// Slack is added to the TTL of every assignment the owner counts: the
// time the answer takes to reach Envoy, whose TTL starts on arrival.
const Slack = 200 * time.Millisecond

// Config configures a Table.
type Config struct {
	// Interval is how often instances are expected to report. Zero means
	// DefaultInterval (Envoy reports about every 5 s). It sets the TTL's
	// default and the time after which a silent instance no longer
	// counts for the fair shares.
	Interval time.Duration
	// TTL is how long an assignment may be used after it was handed out,
	// rounded up to whole seconds (Envoy's resolution). Zero means two
	// Intervals. Longer: an instance survives a late report or an
	// unreachable owner longer; shorter: capacity given back by one
	// instance reaches the others sooner (a shift converges in about one
	// TTL plus a report).
	TTL time.Duration
	// MaxBuckets bounds the buckets of the table; zero means
	// DefaultMaxBuckets.
	MaxBuckets int
	// MaxInstances bounds the instances reporting on one bucket; zero
	// means DefaultMaxInstances.
	MaxInstances int
}

// Report is one instance's usage of one bucket since its previous report.
type Report struct {
	Key      string  // the bucket: domain, rule and the matched values
	Group    string  // the bucket's domain and rule, for Stats
	Limit    float64 // the bucket's limit, requests per second
	Instance string  // the reporting instance (one Envoy stream)
	Allowed  uint64
	Denied   uint64
	// Elapsed is the time the counts cover. Envoy sends 0 on a bucket's
	// first report: no demand is learnt from it.
	Elapsed time.Duration
	// Held is the assignment the instance holds, as the node of its
	// stream last pushed it: its rate (requests per second) and the time
	// left of its TTL (0: none, or ended). The owner counts a held
	// assignment it does not know (one an earlier owner handed out) until
	// it ends.
	Held     float64
	HeldLeft time.Duration
	// Settled says no ownership change can have brought the bucket here
	// while an assignment handed out elsewhere may still be in use (the
	// ring has not changed for a TTL and more): a bucket new here is new
	// everywhere, and needs no learning.
	Settled bool
	// LearnUntil: a bucket new here learns at least until then (zero:
	// one interval). The node's start plus an assignment's life: after a
	// restart of every node nobody can tell what the instances hold, and
	// nothing new is handed out while an assignment from before may be in
	// use.
	LearnUntil time.Time
}

// Assignment is an instance's share of a bucket as a token bucket: Tokens
// are added every Fill, up to Tokens. Tokens 0 denies every request.
// Fill and TTL are whole seconds.
type Assignment struct {
	Tokens uint32
	Fill   time.Duration
	TTL    time.Duration
	// Retry, when not zero, is when to ask again without waiting for the
	// next report: the instance got less than its fair share because
	// another instance's superseded assignment is still counted, and that
	// one ends then.
	Retry time.Duration
	// None: no assignment at all, the caller sends nothing (Envoy keeps
	// its no-assignment or expired-assignment behaviour). Only while a
	// bucket learns (Table), for an instance that holds nothing.
	None bool
}

// Rate is the assignment's rate, requests per second.
func (a Assignment) Rate() float64 {
	if a.Fill <= 0 {
		return 0
	}
	return float64(a.Tokens) / a.Fill.Seconds()
}

// Table holds the buckets a node owns. It is safe for concurrent use;
// every method takes one mutex and does nothing slow under it.
type Table struct {
	cfg     Config
	mu      sync.Mutex
	buckets map[string]*bucket // guarded by mu
}

// bucket is one bucket's instances.
type bucket struct {
	group     string
	limit     float64
	instances map[string]*instance
	replica   bool // imported from its owner (replica.go), not reported on here since
	// learning ends when every instance that may hold an assignment of an
	// earlier owner has reported it: a report interval (plus Slack) after
	// the first report this owner got on a bucket it held no own state of.
	// Until then each instance keeps what it holds and gets nothing new.
	learning time.Time
}

// instance is one reporting instance of a bucket.
type instance struct {
	demand  float64   // smoothed, requests per second; +Inf until a first sample
	falling bool      // the last sample was lower than the demand before it
	seen    time.Time // last report
	current lease     // the last assignment handed out
	// older are the superseded assignments that may still be in use (their
	// TTL has not ended): a few at most, as each ends a TTL after it was
	// handed out.
	older []lease
}

// lease is an assignment's rate and the end of its TTL.
type lease struct {
	rate  float64
	until time.Time
}

// live returns the lease's rate while it may be in use at now, else 0.
func (l lease) live(now time.Time) float64 {
	if now.Before(l.until) {
		return l.rate
	}
	return 0
}

// outstanding is the most the instance may be spending at now: any of its
// assignments still within its TTL may be the one in use, as the owner
// cannot know which one reached it.
func (in *instance) outstanding(now time.Time) float64 {
	m := in.current.live(now)
	for _, l := range in.older {
		m = max(m, l.live(now))
	}
	return m
}

// New returns an empty Table.
func New(cfg Config) *Table {
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultInterval
	}
	if cfg.TTL <= 0 {
		cfg.TTL = 2 * cfg.Interval
	}
	cfg.TTL = wholeSeconds(cfg.TTL)
	if cfg.MaxBuckets <= 0 {
		cfg.MaxBuckets = DefaultMaxBuckets
	}
	if cfg.MaxInstances <= 0 {
		cfg.MaxInstances = DefaultMaxInstances
	}
	return &Table{cfg: cfg, buckets: map[string]*bucket{}}
}

// TTL returns the TTL of the table's assignments.
func (t *Table) TTL() time.Duration { return t.cfg.TTL }

func wholeSeconds(d time.Duration) time.Duration {
	return time.Duration(math.Ceil(d.Seconds())) * time.Second
}

// Report records r at now and returns the reporting instance's new
// assignment: its fair share of the limit among the instances that
// reported within a TTL, cut to what the others' outstanding assignments
// leave free.
func (t *Table) Report(now time.Time, r Report) (Assignment, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	b := t.buckets[r.Key]
	if b == nil {
		if len(t.buckets) >= t.cfg.MaxBuckets {
			return Assignment{}, ErrFull
		}
		b = &bucket{instances: map[string]*instance{}}
		t.buckets[r.Key] = b
	}
	if b.replica || (len(b.instances) == 0 && !r.Settled) {
		// New here (a join, a restart, a stale replica) while the ring may
		// have moved it: instances that have not reported yet may hold an
		// earlier owner's assignments.
		b.learning = maxTime(now.Add(t.cfg.Interval+Slack), r.LearnUntil)
	}
	b.group, b.limit, b.replica = r.Group, max(r.Limit, 0), false
	in := b.instances[r.Instance]
	if in == nil {
		if len(b.instances) >= t.cfg.MaxInstances {
			return Assignment{}, ErrFull
		}
		in = &instance{demand: math.Inf(1)}
		b.instances[r.Instance] = in
	}
	in.seen = now
	in.observe(r)
	in.learn(now, r, t.cfg.TTL)
	if now.Before(b.learning) {
		return t.holdLocked(now, b, in, r), nil
	}
	a := t.assignLocked(now, b, r.Instance, in)
	return a, nil
}

// learn records the assignment r says the instance holds, unless one of
// its live leases covers it: an earlier owner's, counted until it ends
// (at most a TTL and Slack from now).
func (in *instance) learn(now time.Time, r Report, ttl time.Duration) {
	if r.Held <= 0 || math.IsNaN(r.Held) || r.HeldLeft <= 0 {
		return
	}
	if in.current.live(now) >= r.Held {
		return
	}
	for _, l := range in.older {
		if l.live(now) >= r.Held {
			return
		}
	}
	in.older = append(in.older, lease{rate: r.Held, until: now.Add(min(r.HeldLeft, ttl+Slack))})
}

// holdLocked is the assignment of an instance of a learning bucket: the
// rate it holds (within the limit), for one interval, and a retry when
// learning ends. The held assignments were all counted by the earlier
// owner, so together they stay within the limit; an instance holding
// nothing gets nothing until the others have told what they hold.
func (t *Table) holdLocked(now time.Time, b *bucket, in *instance, r Report) Assignment {
	held := 0.0
	if r.HeldLeft > 0 && r.Held > 0 && !math.IsNaN(r.Held) {
		held = r.Held
	}
	// A hold this table gave lasts one interval: the instance's next
	// report may come as it ends and tell nothing held. Its lease here,
	// counted until its TTL and Slack end, is what it holds.
	held = min(max(held, in.current.live(now)), b.limit)
	a := quantize(held, wholeSeconds(t.cfg.Interval))
	a.Retry = b.learning.Sub(now)
	a.None = a.Tokens == 0
	in.record(now, a.Rate(), a.TTL)
	return a
}

// record makes rate, for ttl from now, the instance's current lease; the
// previous one stays counted until it ends.
func (in *instance) record(now time.Time, rate float64, ttl time.Duration) {
	in.older = slices.DeleteFunc(in.older, func(l lease) bool { return l.live(now) == 0 })
	if in.current.rate != rate && in.current.live(now) > 0 {
		// The previous assignment may still be in use until its TTL ends.
		in.older = append(in.older, in.current)
	}
	in.current = lease{rate: rate, until: now.Add(ttl + Slack)}
}

// observe folds r's counts into the instance's demand.
func (in *instance) observe(r Report) {
	if r.Elapsed < time.Second/2 {
		return // a first report: no interval to divide by
	}
	sample := float64(r.Allowed+r.Denied) / r.Elapsed.Seconds()
	in.falling = sample < (1-hysteresis)*in.demand && !math.IsInf(in.demand, 1)
	if sample <= in.demand || math.IsInf(in.demand, 1) {
		in.demand = sample
		return
	}
	in.demand += rise * (sample - in.demand)
}

// assignLocked computes and records the assignment of instance id of b.
func (t *Table) assignLocked(now time.Time, b *bucket, id string, in *instance) Assignment {
	active := now.Add(-t.cfg.TTL)
	demands := make([]float64, 0, len(b.instances))
	others, mine := 0.0, -1
	var ends time.Time // the first end of another instance's superseded assignment
	for jid, j := range b.instances {
		if jid != id {
			others += j.outstanding(now)
			ends = firstEnd(now, ends, j.older)
		}
		if j.seen.After(active) {
			if jid == id {
				mine = len(demands)
			}
			demands = append(demands, j.demand)
		}
	}
	free := b.limit - others
	target := FairShares(b.limit, demands)[mine]
	want := min(target, free)
	if math.IsInf(in.demand, 1) {
		// No demand known (a first report): half of what is free, so that
		// the instances that arrive in the same interval find some left.
		want = min(target, free/2)
	}
	if cur := in.current.live(now); cur > 0 && cur <= free && math.Abs(want-cur) <= hysteresis*cur {
		// Keep the assignment: Envoy refills the token bucket of every
		// new strategy, so a change is a burst; one of a few percent is
		// not worth it.
		want = cur
	}
	if cur := in.current.live(now); cur > 0 && cur < want && want < (1-hysteresis)*target && !ends.IsZero() {
		// Held back by assignments that end soon: grow once, to the whole
		// share, when they have (the retry), not by a step at each end:
		// every new token bucket starts full.
		want = cur
	}
	ttl := t.cfg.TTL
	if math.IsInf(in.demand, 1) || in.falling {
		// No demand known yet (a first report), or a demand that fell: a
		// share for one interval only, as the next report will likely
		// shrink it and its end is what the others wait for. Envoy reports
		// a new bucket at once and then with all its buckets, every
		// interval.
		ttl = min(ttl, wholeSeconds(t.cfg.Interval))
	}
	a := quantize(want, ttl)
	if target-a.Rate() > hysteresis*target && !ends.IsZero() {
		a.Retry = ends.Sub(now) // held back by an assignment that ends then
	}
	in.record(now, a.Rate(), ttl)
	return a
}

// firstEnd returns the earlier of first and the first end after now of
// leases (zero first: none yet).
func firstEnd(now, first time.Time, leases []lease) time.Time {
	for _, l := range leases {
		if l.until.After(now) && (first.IsZero() || l.until.Before(first)) {
			first = l.until
		}
	}
	return first
}

// fills are the fill intervals, in seconds, an assignment may use: the
// shortest that keeps 95% of the rate's precision wins.
var fills = []int{1, 2, 5, 10, 30, 60}

// quantize turns a rate into a token bucket whose rate does not exceed
// it: Envoy's fill intervals are whole seconds and tokens are integers.
func quantize(rate float64, ttl time.Duration) Assignment {
	a := Assignment{Fill: time.Second, TTL: ttl}
	if rate <= 0 || math.IsNaN(rate) {
		return a
	}
	for _, f := range fills {
		tokens := math.Floor(rate * float64(f))
		if tokens >= math.MaxUint32 {
			return Assignment{Tokens: math.MaxUint32, Fill: time.Duration(f) * time.Second, TTL: ttl}
		}
		a = Assignment{Tokens: uint32(tokens), Fill: time.Duration(f) * time.Second, TTL: ttl}
		if tokens >= 0.95*rate*float64(f) && tokens > 0 {
			return a
		}
	}
	return a
}

// Sweep forgets, at now, the instances that have not reported for a TTL
// and whose assignments have all ended, and the buckets left without
// instances (abandoned: nobody reports on them). It returns how many
// buckets it dropped.
func (t *Table) Sweep(now time.Time) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	dropped := 0
	quiet := now.Add(-t.cfg.TTL)
	for key, b := range t.buckets {
		for id, in := range b.instances {
			if !in.seen.After(quiet) && in.outstanding(now) == 0 {
				delete(b.instances, id)
			}
		}
		if len(b.instances) == 0 {
			delete(t.buckets, key)
			dropped++
		}
	}
	return dropped
}

// GroupStats sums the buckets of one group (a domain and rule).
type GroupStats struct {
	Buckets   int
	Instances int     // instances that reported within a TTL
	Assigned  float64 // outstanding assignments, requests per second
	Demand    float64 // smoothed demand of the instances, requests per second
}

// Stats returns, at now, the sums of the table's buckets per group (not
// the replicas it holds).
func (t *Table) Stats(now time.Time) map[string]GroupStats {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := map[string]GroupStats{}
	active := now.Add(-t.cfg.TTL)
	for _, b := range t.buckets {
		if b.replica {
			continue // another node's: counted there
		}
		g := out[b.group]
		g.Buckets++
		for _, in := range b.instances {
			g.Assigned += in.outstanding(now)
			if in.seen.After(active) {
				g.Instances++
				if !math.IsInf(in.demand, 1) {
					g.Demand += in.demand
				}
			}
		}
		out[b.group] = g
	}
	return out
}
