package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The runs below play Envoy instances (the load tool's harness,
// rlqssim.go) against three real shardlimiter processes and stop nodes
// under them. An assignment lives two report intervals.

// rlqsCrashCluster starts three nodes with a bucket of limit per second
// and reports every interval, and returns the cluster and the tool's
// configuration for the instances (each wanting its demand), with the
// further flags of the tool more.
//
// The tests that use it run in parallel (t.Parallel), two at a time by
// default, as the throughput and churn tests do: six instances at a few
// hundred checks per second load a node far less than those, and most of
// each test is waiting for reports, a crash and a restart. Serially the
// four took 238 s of the package's 370 s.
func rlqsCrashCluster(t *testing.T, limit float64, interval time.Duration, demands string, more ...string) (*localCluster, *config) {
	t.Helper()
	args := append([]string{"--api", "rlqs", "--local", "3", "--server-bin", serverBin(t), "--rlqs-interval", interval.String(),
		"--rlqs-limit", strconv.FormatFloat(limit, 'f', -1, 64), "--rlqs-demand", demands, "--quiet"}, more...)
	cfg, err := parseFlags(args, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	var log bytes.Buffer
	c, cleanup, err := startRLQSCluster(context.Background(), cfg, &log)
	if err != nil {
		t.Fatalf("local cluster: %v\n%s", err, log.String())
	}
	t.Cleanup(cleanup)
	return c, cfg
}

// eventually polls cond every 20 ms until it holds or within passes.
func eventually(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	tick := time.NewTicker(pollEvery)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not %s within %v", what, within)
		}
		<-tick.C
	}
}

// rlqsOwners returns the nodes (1-based) that own a quota bucket of the
// rule per_tenant: whose gauge shardlimiter_rlqs_buckets says so.
func rlqsOwners(c *localCluster) []int {
	var out []int
	for i, nd := range c.nodes {
		if !nd.running() {
			continue
		}
		if gauge(nd.http, `shardlimiter_rlqs_buckets{domain="edge",rule="per_tenant"}`) >= 1 {
			out = append(out, i+1)
		}
	}
	return out
}

// gauge returns the value of the series named so on the node's /metrics
// (NaN when absent or unreachable).
func gauge(httpAddr, series string) float64 {
	resp, err := httpClient.Get(httpScheme + httpAddr + "/metrics")
	if err != nil {
		return math.NaN()
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return math.NaN()
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), series+" "); ok {
			if f, err := strconv.ParseFloat(v, 64); err == nil {
				return f
			}
		}
	}
	return math.NaN()
}

// assignedNow returns the rates the instances hold now (NaN: none yet).
func (p *rlqsPlay) assignedNow() []float64 {
	at := time.Since(p.start)
	out := make([]float64, len(p.sims))
	for i, e := range p.sims {
		e.mu.Lock()
		out[i] = e.rateAtTime(at)
		e.mu.Unlock()
	}
	return out
}

// converged reports whether every instance holds share within 10%.
func converged(rates []float64, share float64) bool {
	for _, r := range rates {
		if math.IsNaN(r) || math.Abs(r-share) > 0.1*share {
			return false
		}
	}
	return true
}

// waitConverged polls until every instance has held share (within 10%)
// for two intervals running: past the start's learning and the halves
// of the first assignments.
func (p *rlqsPlay) waitConverged(t *testing.T, share float64, interval time.Duration) {
	t.Helper()
	var since time.Time
	eventually(t, 10*interval, fmt.Sprintf("converged at %g/s each for %v", share, 2*interval), func() bool {
		switch {
		case !converged(p.assignedNow(), share):
			since = time.Time{}
		case since.IsZero():
			since = time.Now()
		}
		return !since.IsZero() && time.Since(since) >= 2*interval
	})
}

// perSecond returns the instances' admitted total of each whole second.
func (p *rlqsPlay) perSecond(n int) []float64 {
	out := make([]float64, n)
	for s := range n {
		for _, e := range p.sims {
			out[s] += e.admittedAt(s)
		}
	}
	return out
}

// TestRLQSOwnerCrashAgainstLocalCluster plays six instances wanting
// 300/s each on a bucket of 600/s, converged at 100/s each, SIGKILLs the
// node that owns the bucket, and restarts it two intervals later (the
// bucket moves to the backup, which holds every assignment in use, each
// replicated before it was answered, and back to the restarted node,
// which starts empty and learns what the instances hold). The instances
// whose streams the killed node held open streams to the next node, which
// does not know what they hold. Through both moves the admitted total
// stays within the limit but for the bursts of new token buckets (one
// fill of each instance, docs/RLQS.md#guarantees), and it neither resets
// to zero nor to unlimited (the demand is three times the limit): it
// stays near the limit.
func TestRLQSOwnerCrashAgainstLocalCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a local cluster and kills a node")
	}
	t.Parallel() // see rlqsCrashCluster
	rlqsKillAndRestart(t, true)
}

// TestRLQSStreamNodeCrashAgainstLocalCluster is the same with a node that
// holds streams but does not own the bucket: its instances reopen their
// streams on the next node, which does not know what they hold; the owner
// counts what it handed out to their old streams until it ends.
func TestRLQSStreamNodeCrashAgainstLocalCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a local cluster and kills a node")
	}
	t.Parallel() // see rlqsCrashCluster
	rlqsKillAndRestart(t, false)
}

// rlqsKillAndRestart runs the crash of the bucket's owner (owner) or of
// another node, and its restart.
func rlqsKillAndRestart(t *testing.T, owner bool) {
	// Reports every 5 s, as Envoy sends them: an assignment lives 10 s,
	// longer than gossip takes to notice the crash and move the bucket
	// (4-5 s). With 1 s reports (2 s assignments) the instances'
	// assignments end first and they deny (their
	// expired_assignment_behavior) until it has.
	const limit, share, interval, run = 600.0, 100.0, 5 * time.Second, 70 * time.Second
	c, cfg := rlqsCrashCluster(t, limit, interval, "300,300,300,300,300,300")
	p, err := playRLQS(context.Background(), &cfg.rlqs, c.grpcAddrs(), run)
	if err != nil {
		t.Fatal(err)
	}
	defer p.wait()
	p.waitConverged(t, share, interval)
	var victim int
	eventually(t, 5*time.Second, "one owner of the bucket", func() bool {
		o := rlqsOwners(c)
		if len(o) == 1 {
			victim = o[0]
		}
		return len(o) == 1
	})
	what := "the owner"
	if !owner {
		victim, what = victim%3+1, "a stream node, not the owner"
	}
	killedAt := time.Since(p.start)
	held := 0.0
	for _, r := range p.assignedNow() {
		held += r
	}
	prev := c.nodes[victim-1]
	if err := killAndWait(prev, sigKill); err != nil {
		t.Fatal(err)
	}
	t.Logf("converged; killed %s, node %d, at %.2fs (assignments in use: %.0f/s)", what, victim, killedAt.Seconds(), held)
	sleepUntil(context.Background(), p.start.Add(killedAt+2*interval)) // the scenario: down for two intervals
	nd, _, err := c.launch(victim, prev)
	if err != nil {
		t.Fatal(err)
	}
	c.nodes[victim-1] = nd
	restartedAt := time.Since(p.start)
	t.Logf("restarted node %d, ready at %.2fs", victim, restartedAt.Seconds())
	if restartedAt > run-5*interval {
		t.Fatalf("the restart took until %.1fs of a %v run: nothing left to observe", restartedAt.Seconds(), run)
	}
	p.wait()
	checkCrashRun(t, p, limit, held, interval, killedAt, restartedAt, run)
}

// excess returns, over the seconds from from on, the most any span of
// whole seconds admitted over the limit of the span (limit × its
// seconds), and the highest mean of two seconds.
func excess(secs []float64, from int, limit float64) (over, peak2 float64) {
	for a := from; a < len(secs); a++ {
		sum := 0.0
		for b := a; b < len(secs); b++ {
			sum += secs[b]
			over = max(over, sum-limit*float64(b-a+1))
			if b == a+1 {
				peak2 = max(peak2, sum/2)
			}
		}
	}
	return over, peak2
}

// checkCrashRun checks the admitted totals of a run with a crash at
// killedAt and a restart at restartedAt.
func checkCrashRun(t *testing.T, p *rlqsPlay, limit, held float64, interval, killedAt, restartedAt, run time.Duration) {
	t.Helper()
	secs := p.perSecond(int(run / time.Second))
	from := max(int(killedAt/time.Second)-2, 0)
	over, peak2 := excess(secs, from, limit)
	peak, low := 0.0, math.Inf(1)
	for s := from; s < len(secs); s++ {
		peak = max(peak, secs[s])
		low = min(low, secs[s])
	}
	recovered := int((restartedAt + 3*interval) / time.Second) // learning, then the fair shares
	late := 0.0
	for s := recovered; s < len(secs); s++ {
		late += secs[s]
	}
	late /= float64(len(secs) - recovered)
	reconnects := 0
	for _, e := range p.sims {
		reconnects += e.reconnects
	}
	t.Logf("admitted per second (limit %.0f): %v", limit, secs)
	t.Logf("from 2 s before the kill: the most any span admitted over the limit %.0f requests (bound: one fill of each instance, %.0f); highest second %.3f × limit, highest 2 s %.3f ×, lowest second %.3f ×; from %d s on, average %.3f × limit; %d streams reopened; stream errors %v",
		over, held, peak/limit, peak2/limit, low/limit, recovered, late/limit, reconnects, p.errs)
	for i, e := range p.sims {
		e.mu.Lock()
		t.Logf("instance %d: rates %v phases %v reports %v", i, e.rates, e.phases, e.reports)
		e.mu.Unlock()
	}
	// Every assignment in use is known to the owner (the backup after the
	// crash): what passes the limit is the bursts of new token buckets,
	// one fill of each instance (the assignments in use over 1 s).
	if over > held {
		t.Errorf("a span admitted %.0f requests over the limit after the crash, want at most %.0f (one fill of each instance)", over, held)
	}
	// A reset to unlimited admits the demand, three times the limit.
	if peak2 > 1.5*limit {
		t.Errorf("two seconds admitted %.0f/s, %.2f × the limit: want at most 1.5 × (the limit and the bursts of new token buckets)", peak2, peak2/limit)
	}
	// A reset to zero stops every instance; losing the owner costs at most
	// the instances of the killed node's streams for a few seconds.
	if low < 0.3*limit {
		t.Errorf("a second admitted %.0f, %.2f × the limit: the assignments reset (want at least 0.3 ×)", low, low/limit)
	}
	if late < 0.85*limit {
		t.Errorf("after the restart the instances admitted %.0f/s on average, %.2f × the limit: want at least 0.85 ×", late, late/limit)
	}
	if reconnects == 0 {
		t.Error("no instance opened a new stream: the killed node held none")
	}
}

// TestRLQSWholeClusterStopAgainstLocalCluster plays six instances on
// three nodes, converged, then stops every node (SIGTERM, at once). With
// no node left, no assignment is renewed: each instance keeps its last
// one until its TTL ends (1 or 2 s, reports every second), then applies its
// expired_assignment_behavior, here DENY_ALL for 3 s
// (expired_assignment_behavior_timeout), after which the bucket is
// abandoned and the instance admits all (its no_assignment_behavior,
// ALLOW_ALL). Each instance is checked to enter each phase on time and
// to admit what the phase says.
func TestRLQSWholeClusterStopAgainstLocalCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a local cluster and stops it")
	}
	t.Parallel() // see rlqsCrashCluster
	const limit, share, interval, behave = 600.0, 100.0, time.Second, 3 * time.Second
	const run = 22 * time.Second
	c, cfg := rlqsCrashCluster(t, limit, interval, "300,300,300,300,300,300", "--rlqs-expired", "deny", "--rlqs-expired-timeout", behave.String())
	p, err := playRLQS(context.Background(), &cfg.rlqs, c.grpcAddrs(), run)
	if err != nil {
		t.Fatal(err)
	}
	defer p.wait()
	p.waitConverged(t, share, interval)
	stopAt := time.Since(p.start)
	errs := make(chan error, len(c.nodes))
	for _, nd := range c.nodes {
		go func() { errs <- killAndWait(nd, sigTerm) }()
	}
	for range c.nodes {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	stoppedAt := time.Since(p.start)
	t.Logf("converged; stopped every node from %.2fs, all exited at %.2fs", stopAt.Seconds(), stoppedAt.Seconds())
	if stoppedAt+2*interval+behave+2*time.Second > run {
		t.Fatalf("the stop took until %.1fs of a %v run: nothing left to observe", stoppedAt.Seconds(), run)
	}
	p.wait()
	const late = 250 * time.Millisecond // a tick of a loaded machine
	for i, e := range p.sims {
		e.mu.Lock()
		last, ttl, phases := e.lastAction, e.lastTTL, slices.Clone(e.phases)
		e.mu.Unlock()
		t.Logf("instance %d: last assignment at %.2fs, TTL %v; phases %v", i, last.Seconds(), ttl, phases)
		if ttl != interval && ttl != 2*interval {
			t.Errorf("instance %d: its last assignment's TTL is %v, want one or two intervals", i, ttl)
		}
		if last < stopAt-interval-late || last > stoppedAt {
			t.Errorf("instance %d: last assignment at %.2fs, want shortly before the stop (%.2f-%.2fs)", i, last.Seconds(), stopAt.Seconds(), stoppedAt.Seconds())
		}
		n := len(phases)
		if n < 2 || phases[n-2].phase != phaseExpired || phases[n-1].phase != phaseAbandoned {
			t.Errorf("instance %d: phases %v, want the last two expired, then abandoned", i, phases)
			continue
		}
		expired, abandoned := phases[n-2].at, phases[n-1].at
		if expired < last+ttl || expired > last+ttl+late {
			t.Errorf("instance %d: expired at %.2fs, want at its assignment's end, %.2fs", i, expired.Seconds(), (last + ttl).Seconds())
		}
		if abandoned < last+ttl+behave || abandoned > last+ttl+behave+late {
			t.Errorf("instance %d: abandoned at %.2fs, want %v after its assignment's end (%.2fs)", i, abandoned.Seconds(), behave, (last + ttl).Seconds())
		}
		// Whole seconds inside each phase: nothing while DENY_ALL applies,
		// the whole demand once abandoned.
		for s := int(expired/time.Second) + 1; s < int(abandoned/time.Second); s++ {
			if got := e.admittedAt(s); got != 0 {
				t.Errorf("instance %d: admitted %v in second %d, under its expired behaviour DENY_ALL: want 0", i, got, s)
			}
		}
		from, to := int(abandoned/time.Second)+1, int(run/time.Second)-1
		sum := 0.0
		for s := from; s < to; s++ {
			sum += e.admittedAt(s)
		}
		if avg := sum / float64(to-from); math.Abs(avg-300) > 30 {
			t.Errorf("instance %d: admitted %.1f/s from second %d on, abandoned (ALLOW_ALL): want its demand, 300", i, avg, from)
		}
	}
	t.Logf("admitted per second (limit %.0f): %v", limit, p.perSecond(int(run/time.Second)))
}

// TestRLQSWholeClusterRestartAgainstLocalCluster SIGKILLs every node once
// the instances converged and starts them all again at once: nobody
// remembers what the instances hold (the owners' records and the streams'
// pushes are gone), while their assignments live on in the instances for
// up to a TTL. The nodes learn new buckets until an assignment's life
// after their start, so nothing new is handed out while an old one may
// be in use: nothing over the limit but the bursts of new token buckets.
func TestRLQSWholeClusterRestartAgainstLocalCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a local cluster and restarts it")
	}
	t.Parallel() // see rlqsCrashCluster
	const limit, share, interval, run = 600.0, 100.0, 5 * time.Second, 65 * time.Second
	c, cfg := rlqsCrashCluster(t, limit, interval, "300,300,300,300,300,300")
	p, err := playRLQS(context.Background(), &cfg.rlqs, c.grpcAddrs(), run)
	if err != nil {
		t.Fatal(err)
	}
	defer p.wait()
	p.waitConverged(t, share, interval)
	killedAt := time.Since(p.start)
	held := 0.0
	for _, r := range p.assignedNow() {
		held += r
	}
	prev := slices.Clone(c.nodes)
	for _, nd := range prev {
		if err := killAndWait(nd, sigKill); err != nil {
			t.Fatal(err)
		}
	}
	for i, nd := range prev { // node 1 first: the others join it
		again, _, err := c.launch(i+1, nd)
		if err != nil {
			t.Fatal(err)
		}
		c.nodes[i] = again
	}
	restartedAt := time.Since(p.start)
	t.Logf("converged; killed every node at %.2fs (assignments in use: %.0f/s), all ready again at %.2fs", killedAt.Seconds(), held, restartedAt.Seconds())
	if err := c.converge(context.Background(), convergeWithin); err != nil {
		t.Fatal(err)
	}
	p.wait()
	secs := p.perSecond(int(run / time.Second))
	over, peak2 := excess(secs, max(int(killedAt/time.Second)-2, 0), limit)
	recovered := int((restartedAt + 4*interval) / time.Second)
	late := 0.0
	for s := recovered; s < len(secs); s++ {
		late += secs[s]
	}
	late /= float64(len(secs) - recovered)
	t.Logf("admitted per second (limit %.0f): %v", limit, secs)
	t.Logf("from 2 s before the kill: the most any span admitted over the limit %.0f requests (bound: one fill of each instance, %.0f), highest 2 s %.3f × limit; from %d s on, average %.3f × limit",
		over, held, peak2/limit, recovered, late/limit)
	// One fill of each instance is reached exactly when every instance,
	// denied until then, gets its new assignment in one second: each
	// bucket starts full. An instance whose share changes again while the
	// owners learn the demand gets a new, full bucket once more, so the
	// bound asserted is two fills; handing out new assignments while the
	// old ones were in use would admit a whole limit per second more,
	// for as long as they lasted (a TTL, 10 s here: 6,000).
	if over > 2*held {
		t.Errorf("a span admitted %.0f requests over the limit after the restart, want at most %.0f (two fills of each instance): new assignments were handed out while old ones were in use", over, 2*held)
	}
	if late < 0.85*limit {
		t.Errorf("after the restart the instances admitted %.0f/s on average, %.2f × the limit: want at least 0.85 ×", late, late/limit)
	}
}

func TestExcess(t *testing.T) {
	// 100 over in second 2, 130 in second 4: the span 2-4 is 230 over,
	// the most; second 0 is not counted.
	over, peak2 := excess([]float64{2000, 600, 700, 600, 730, 500}, 1, 600)
	if over != 230 || peak2 != 665 {
		t.Errorf("excess = %v, %v; want 230 (seconds 2-4), 665 (seconds 3-4)", over, peak2)
	}
}
