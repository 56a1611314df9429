package sim

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/shardlimiter/shardlimiter/ring"
)

// Params choose what a Run measures. Zero values are defaults.
type Params struct {
	N int // members; required
	K int // keys of state; 0 means 10,000
	// Scenarios run after forming, in this order: "idle" (gossip bytes
	// and CPU), "forward", "replicate", "join", "leave", "crash",
	// "partition", "restart" (a rolling restart of every member). Nil
	// means all but "restart".
	Scenarios []string
	Window    time.Duration // of "idle" and "replicate"; 0 means 5 s
	Rate      int           // checks/s of "replicate"; 0 means 1,000
	Batches   int           // of 100 checks, for "forward"; 0 means 1,000
	Timeout   time.Duration // for each agreement; 0 means 60 s
	// RingOnly measures the ring alone (rebuild, spread, keys moved by a
	// join), with no members running: for sizes the machine cannot run.
	RingOnly bool
	// Virtual says that Run is called inside a testing/synctest bubble
	// (synctest.Test), where the clock is virtual: it moves only when
	// every member waits on a timer or a channel, so however slow the
	// machine, no timeout fires because a member was starved of CPU.
	// Agreement times, gossip bytes per second and replication rates are
	// then the protocols' own; ring rebuilds and forwarded checks are
	// timed by the machine's clocks in both modes, and the idle CPU is the
	// machine's CPU per virtual second. Run behaves the same either way;
	// Virtual labels the report.
	Virtual bool
	// Static forms the cluster with FormStatic (every member knows the
	// ring of N from the start, no gossip) instead of Form, for the
	// figures of a formed ring (forward, replicate) at sizes that take
	// longer to form than the machine allows. Scenarios that change
	// membership fail on it.
	Static bool
}

// Report holds one Run's figures; a zero figure was not measured.
type Report struct {
	N, K    int
	Virtual bool // measured in a synctest bubble (Params.Virtual)

	Form                  time.Duration // from the first start to one ring of N
	RingBuild             time.Duration // ring.New and Without, at N
	Spread                Spread        // busiest over mean
	JoinMovedIdeal        float64       // keys moved by the join ÷ 1/(N+1)
	GossipBytes           float64       // per member per second, idle
	GossipBytesBusiest    float64       // the busiest member's, per second
	CPUPerMember          float64       // idle, seconds per second per member (all the node's goroutines)
	ForwardMsgs           float64       // Forward calls per batch of 100 entering a random member
	ForwardPerCheck       time.Duration // wall time per check of the median such batch, one at a time
	ForwardCPU            time.Duration // the process's CPU per check over those batches
	ReplicaBytes          float64       // per second, whole cluster, at Rate checks/s
	ReplicaKeys           float64       // key states sent per second, likewise
	Join, Leave, Crash    time.Duration // until every member agrees on the new ring
	JoinHandoff           Handoff
	LeaveHandoff          Handoff
	Split, Heal           time.Duration // each half agrees on itself; all on one ring again
	Restart, RestartWorst time.Duration // rolling restart: whole, and the slowest member's
	Errors                []string      // scenarios that failed, and why
}

// Handoff is what a membership change moved, and until when.
type Handoff struct {
	Took        time.Duration // from the change to the last transfer's answer
	Keys, Bytes int64
}

// Run forms a cluster of p.N members with p.K keys of state and runs the
// scenarios, returning their figures. A scenario that fails is recorded in
// Report.Errors and the next one runs.
func Run(ctx context.Context, opt Options, p Params) (Report, error) {
	p = p.withDefaults()
	r := Report{N: p.N, K: p.K, Virtual: p.Virtual}
	var err error
	keys := Keys(rand.New(rand.NewPCG(opt.Seed, 1)), p.K)
	if p.RingOnly {
		r.RingBuild, r.Spread, r.JoinMovedIdeal, err = RingOnly(p.N, keys, opt.Ring)
		return r, err
	}
	if r.RingBuild, err = RingBuild(p.N, max(3, 3000/p.N), opt.Ring); err != nil {
		return r, err
	}
	start := time.Now()
	c := NewCluster(opt)
	defer c.Stop()
	if r.Form, err = form(c, p); err != nil {
		return r, err
	}
	if !opt.GossipOnly {
		if err := c.Fill(ctx, keys, 100); err != nil {
			return r, err
		}
		// Let the fill's replication go out before anything is measured.
		time.Sleep(time.Second)
	}
	snap, err := c.ring(c.Running()[0])
	if err != nil {
		return r, err
	}
	r.Spread = SpreadOf(snap, keys)
	progress(opt, "form and fill", start)
	for _, s := range p.Scenarios {
		fn := scenarios[s]
		if fn == nil {
			return r, fmt.Errorf("sim: unknown scenario %q", s)
		}
		t0 := time.Now()
		if err := runnable(s, opt, p); err != nil {
			r.Errors = append(r.Errors, err.Error())
		} else if err := fn(ctx, c, p, keys, &r); err != nil {
			r.Errors = append(r.Errors, s+": "+err.Error())
		}
		progress(opt, s, t0)
		if ctx.Err() != nil {
			return r, ctx.Err()
		}
	}
	return r, nil
}

// runnable says why scenario s cannot run on the cluster opt and p make,
// or nil: checks need nodes (not Options.GossipOnly), membership changes
// need gossip (not Params.Static).
func runnable(s string, opt Options, p Params) error {
	switch s {
	case "forward", "replicate":
		if opt.GossipOnly {
			return fmt.Errorf("%s: needs nodes, and members run gossip only", s)
		}
	case "join", "leave", "crash", "partition", "restart":
		if p.Static {
			return fmt.Errorf("%s: needs gossip, and the members' ring is static", s)
		}
	}
	return nil
}

// form starts the cluster's p.N members, in waves through gossip or
// FormStatic.
func form(c *Cluster, p Params) (time.Duration, error) {
	timeout := max(p.Timeout, time.Duration(p.N)*100*time.Millisecond)
	if p.Static {
		return c.FormStatic(p.N, timeout)
	}
	return c.Form(p.N, timeout)
}

func progress(opt Options, step string, since time.Time) {
	if opt.Progress != nil {
		opt.Progress(step, time.Since(since))
	}
}

func (p Params) withDefaults() Params {
	if p.K <= 0 {
		p.K = 10_000
	}
	if p.Scenarios == nil {
		p.Scenarios = []string{"idle", "forward", "replicate", "join", "leave", "crash", "partition"}
	}
	if p.Window <= 0 {
		p.Window = 5 * time.Second
	}
	if p.Rate <= 0 {
		p.Rate = 1000
	}
	if p.Batches <= 0 {
		p.Batches = 1000
	}
	if p.Timeout <= 0 {
		p.Timeout = 60 * time.Second
	}
	return p
}

// ring returns the ring m routes by: with Options.GossipOnly, the ring of
// its gossip's members.
func (c *Cluster) ring(m *Member) (*ring.Snapshot, error) {
	if m.Node == nil {
		return ring.New(m.Gossip.Members(), 1, c.opt.Ring)
	}
	ms := m.Node.Membership()
	return ring.New(ms.Members, ms.Version, ms.Config)
}

type scenario func(ctx context.Context, c *Cluster, p Params, keys []string, r *Report) error

var scenarios = map[string]scenario{
	"idle":      idle,
	"forward":   forward,
	"replicate": replicate,
	"join":      join,
	"leave":     leave,
	"crash":     crash,
	"partition": partition,
	"restart":   restart,
}

// idle measures gossip bytes and CPU over the window with no checks.
func idle(ctx context.Context, c *Cluster, p Params, _ []string, r *Report) error {
	bytes0, by0, cpu0, start := c.Gossip.Sent(), c.Gossip.SentBy(), cpuSeconds(), time.Now()
	select {
	case <-time.After(p.Window):
	case <-ctx.Done():
		return ctx.Err()
	}
	secs := time.Since(start).Seconds()
	n := float64(len(c.Running()))
	r.GossipBytes = float64(c.Gossip.Sent()-bytes0) / n / secs
	r.CPUPerMember = (cpuSeconds() - cpu0) / n / secs
	for a, b := range c.Gossip.SentBy() {
		r.GossipBytesBusiest = max(r.GossipBytesBusiest, float64(b-by0[a])/secs)
	}
	return nil
}

// forward sends batches of 100 random keys into random members.
func forward(ctx context.Context, c *Cluster, p Params, keys []string, r *Report) error {
	var err error
	r.ForwardPerCheck, r.ForwardCPU, r.ForwardMsgs, err = c.ForwardCost(ctx, keys, p.Batches, 100)
	return err
}

// replicate runs p.Rate checks/s of random keys for the window and
// measures the replication bytes it causes.
func replicate(ctx context.Context, c *Cluster, p Params, keys []string, r *Report) error {
	// The keys forward changed go out first.
	time.Sleep(max(time.Second, 3*c.opt.ReplicationInterval))
	rep0, _ := c.Peers.Moved()
	start := time.Now()
	const batch = 100
	every := time.Second * batch / time.Duration(p.Rate)
	for sent := 0; time.Since(start) < p.Window; sent += batch {
		if d := time.Until(start.Add(every * time.Duration(sent/batch))); d > 0 {
			time.Sleep(d)
		}
		part := make([]string, batch)
		for i := range part {
			part[i] = keys[c.Rand.IntN(len(keys))]
		}
		if err := c.Fill(ctx, part, batch); err != nil {
			return err
		}
	}
	// The last round of changes goes out within an interval.
	time.Sleep(2 * c.opt.ReplicationInterval)
	rep1, _ := c.Peers.Moved()
	secs := time.Since(start).Seconds()
	r.ReplicaBytes = float64(rep1.Bytes-rep0.Bytes) / secs
	r.ReplicaKeys = float64(rep1.Keys-rep0.Keys) / secs
	return nil
}
