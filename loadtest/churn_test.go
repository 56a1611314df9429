package main

import (
	"net"
	"slices"
	"testing"
)

// eventLate bounds how long after its offset an event may start: the
// runner's timer, on a loaded machine, plus a previous event's wait.
const eventLate = 1.0 // seconds

// These runs check the churn mechanics on real server processes: the
// events happen at about their times, the cluster converges again and the
// report says so. They do not judge the over-admission: that is the
// server's (state handoff), not the tool's.

func TestChurnGracefulAgainstLocalCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts two clusters and churns them for 3.5 s each")
	}
	t.Parallel()
	const spec = "500ms:join,1500ms:leave=2,2500ms:restart=2"
	r := runJSON(t, "--local", "3", "--server-bin", serverBin(t), "--entry-one", "--mode", "accuracy",
		"--algorithm", "TOKEN_BUCKET,SLIDING_WINDOW", "--duration", "3500ms", "--limit", "5", "--period", "1s", "--keys", "10",
		"--churn", spec)
	if r.Churn != spec || r.Nodes != 3 || r.Pacing == nil || r.ChurnFailed || len(r.Accuracy) != 2 {
		t.Fatalf("report: churn %q, nodes %d, pacing %v, churn failed %v, %d algorithms; want the spec, 3, pacing, false, 2",
			r.Churn, r.Nodes, r.Pacing, r.ChurnFailed, len(r.Accuracy))
	}
	if host, _, _ := net.SplitHostPort(r.Targets[0]); loopbackNote() == "" && host != loopbackIP(1) {
		t.Errorf("entry node listens on %s, want %s (node 1's own loopback address)", r.Targets[0], loopbackIP(1))
	}
	want := []struct {
		event   string
		node    int
		planned float64
		outcome string
	}{{churnJoin, 4, 0.5, "ready"}, {churnLeave, 2, 1.5, "exit 0"}, {churnRestart, 2, 2.5, "ready"}}
	for _, a := range r.Accuracy {
		c := a.Churn
		if c == nil || len(c.Events) != len(want) {
			t.Fatalf("%s: churn %+v, want %d events", a.Algorithm, c, len(want))
		}
		for i, w := range want {
			e := c.Events[i]
			if e.Event != w.event || e.Node != w.node || e.PlannedS != w.planned || e.Outcome != w.outcome || e.Error != "" {
				t.Errorf("%s: event %d = %+v, want %s node %d at %vs: %s", a.Algorithm, i, e, w.event, w.node, w.planned, w.outcome)
			}
			if e.AtS < e.PlannedS || e.AtS > e.PlannedS+eventLate {
				t.Errorf("%s: %s node %d at %.3fs, planned %.3fs: want within %vs after", a.Algorithm, e.Event, e.Node, e.AtS, e.PlannedS, eventLate)
			}
		}
		if c.ConvergedS == nil || *c.ConvergedS < c.Events[2].AtS {
			t.Errorf("%s: converged at %v (%s), want after the restart at %.3fs", a.Algorithm, c.ConvergedS, c.ConvergeError, c.Events[2].AtS)
		}
		// Graceful events: every check is answered (fail policy local).
		if a.FailedChecks != 0 || a.ItemErrors != 0 || a.RPCErrors != 0 {
			t.Errorf("%s: failed %d (item %d, rpc %d), want none for a join, a leave and a restart", a.Algorithm, a.FailedChecks, a.ItemErrors, a.RPCErrors)
		}
		if a.WorstKey == nil || a.AdmittedHits == 0 || a.BoundHits == 0 || a.ScheduledChecks == 0 {
			t.Errorf("%s: worst key %+v, admitted %d, bound %d, scheduled %d; want all reported", a.Algorithm, a.WorstKey, a.AdmittedHits, a.BoundHits, a.ScheduledChecks)
		}
	}
}

func TestChurnKillAndStopAgainstLocalCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster and kills a node")
	}
	t.Parallel()
	r := runJSON(t, "--local", "3", "--server-bin", serverBin(t), "--entry-one", "--mode", "accuracy",
		"--algorithm", "FIXED_WINDOW", "--duration", "2500ms", "--limit", "5", "--period", "1s", "--keys", "10",
		"--churn", "300ms:stop=3/700ms,1s:kill=2")
	if len(r.Accuracy) != 1 || r.Accuracy[0].Churn == nil {
		t.Fatalf("report without churn: %+v", r)
	}
	c := r.Accuracy[0].Churn
	want := []struct {
		event   string
		node    int
		planned float64
		outcome string
	}{{churnStop, 3, 0.3, "SIGSTOP"}, {churnCont, 3, 1.0, "SIGCONT"}, {churnKill, 2, 1.0, "signal: killed"}}
	if len(c.Events) != len(want) {
		t.Fatalf("events %+v, want %d", c.Events, len(want))
	}
	for _, w := range want {
		i := slices.IndexFunc(c.Events, func(e churnRecord) bool { return e.Event == w.event })
		if i < 0 {
			t.Errorf("no %s event in %+v", w.event, c.Events)
			continue
		}
		e := c.Events[i]
		if e.Node != w.node || e.PlannedS != w.planned || e.Outcome != w.outcome || e.Error != "" {
			t.Errorf("event %+v, want %s node %d at %vs: %s", e, w.event, w.node, w.planned, w.outcome)
		}
		if e.AtS < e.PlannedS || e.AtS > e.PlannedS+eventLate {
			t.Errorf("%s node %d at %.3fs, planned %.3fs: want within %vs after", e.Event, e.Node, e.AtS, e.PlannedS, eventLate)
		}
	}
	// The survivors drop the killed node: convergence waits for failure
	// detection, a few seconds after the kill.
	if c.ConvergedS == nil {
		t.Errorf("not converged after the kill: %s", c.ConvergeError)
	}
}
