package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/shardlimiter/shardlimiter/limit"
	"github.com/shardlimiter/shardlimiter/loadtest/nemesis"
)

// nemesisSeed is the schedule of TestNemesisMinute: every fault kind in
// 60 s (nemesis.TestPlanFaults checks the draw of this seed).
const nemesisSeed = 42

// uncountedCap bounds the share of the bound admitted over it outside
// counted fallbacks in TestNemesisMinute: 0.01%. Every such hit is
// reported; 0 in most runs, but a fresh-clone CI run once saw 3 hits over
// (0.0002%) on two SLIDING_WINDOW keys decided by two nodes in the last
// seconds. Two mechanisms of two deciders have since been traced and
// fixed (docs/RELIABILITY.md, "Deviations found": a retried push, a
// take-over racing a pull back); whether that run was one of them is not
// known (its logs were not kept), so the cap stays until runs on CI show
// none.
const uncountedCap = 0.0001

// TestNemesisMinute runs --mode nemesis for 60 s on 3 nodes with a fixed
// seed (as root: in network namespaces, with the partition, slow-link and
// full-disk faults; without root those are skipped) and requires: no
// panic in any node's stderr, no call to a running node left unanswered,
// no hit admitted over the bound of a single perfect limiter outside spans
// covered by counted fallbacks (uncountedCap), every node's peak RSS within its
// --max-memory, and every planned fault applied.
func TestNemesisMinute(t *testing.T) {
	if testing.Short() {
		t.Skip("a 60 s run")
	}
	var stdout, stderr bytes.Buffer
	args := []string{"--mode", "nemesis", "--local", "3", "--server-bin", serverBin(t), "--duration", "60s",
		"--seed", strconv.Itoa(nemesisSeed), "--json", "--quiet"}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	code := run(ctx, args, &stdout, &stderr)
	var r nemesis.Report
	if err := json.Unmarshal(stdout.Bytes(), &r); err != nil {
		t.Fatalf("exit %d, stdout is not one JSON report: %v\nstderr: %s", code, err, stderr.String())
	}
	t.Logf("seed %d: %d faults %v; calls %d (unanswered %d, all to nodes down); over-admission %d hits, %d in counted fallbacks; peak RSS %v",
		r.Seed, len(r.Faults), r.FaultsByKind, r.Calls, r.UnansweredCalls, r.OverAdmittedHits, r.OverCounted, r.PeakRSS)
	if len(r.Panics) > 0 {
		t.Errorf("panics: %v", r.Panics)
	}
	if r.UnansweredUncounted > 0 {
		t.Errorf("%d calls to running nodes unanswered, e.g. %v", r.UnansweredUncounted, r.UncountedCalls)
	}
	// Every hit over the bound must be covered by a counted fallback; the
	// report names the worst uncovered span of each key and the nodes that
	// admitted its checks.
	if float64(r.OverUncounted) > uncountedCap*float64(r.BoundHits) {
		t.Errorf("%d hits over the bound outside counted fallbacks (%.4f%% of the bound %d, want at most %.2f%%): %v",
			r.OverUncounted, 100*float64(r.OverUncounted)/float64(max(r.BoundHits, 1)), r.BoundHits, 100*uncountedCap, r.UncountedKeys)
	}
	if !r.RSSWithin {
		t.Errorf("peak RSS %v over the budget %d", r.PeakRSS, r.MemoryBudget)
	}
	for _, f := range r.Faults {
		if f.Error != "" {
			t.Errorf("%s at %.1fs: %s", f.Kind, f.StartS, f.Error)
		}
	}
	if r.Checks == 0 || r.AnsweredCalls == 0 || r.AdmittedHits == 0 || r.RejectedHits == 0 {
		t.Errorf("checks %d, answered calls %d, admitted %d, rejected %d: want a load that both passes and trips", r.Checks, r.AnsweredCalls, r.AdmittedHits, r.RejectedHits)
	}
	if code != exitOK && !t.Failed() {
		t.Errorf("exit %d without a violation: stderr %s", code, stderr.String())
	}
}

// TestJudgeFindsOverAdmission feeds the checker a made-up history: one
// TOKEN_BUCKET key (limit 20/s, capacity 20) admitted 40 hits within
// 100 ms at 2 s, which no single limiter would, then spread checks the
// bound allows. The scan's best span on its 100 ms grid, [2.0 s, 2.1 s),
// allows 20 + 2: it finds 18 over. Without a counter nemesis.Rise they are
// outside the counted fallbacks; with a stand-in nemesis.Rise then, covered.
func TestJudgeFindsOverAdmission(t *testing.T) {
	ks := nemesis.NewKeySpace("t", func(a limit.Algorithm) limit.Rule { return limit.Rule{Algorithm: a, Limit: 20, Period: time.Second} })
	start := time.Unix(1000, 0).UnixNano()
	history := func() *nemesis.Recorder {
		rec := nemesis.NewRecorder(len(ks.Names))
		at := func(ms int64, admitted bool) {
			send := start + ms*int64(time.Millisecond)
			rec.Add(nemesis.Call{Send: send, Recv: send + int64(time.Millisecond), Node: 1}, []int{0},
				[]limit.Result{{Decision: limit.Decision{Allowed: admitted}, Owner: "loadtest-2"}})
		}
		for i := range int64(40) {
			at(2000+i, true)
		}
		for i := range int64(20) {
			at(5000+i*100, i%2 == 0) // 10 of 20 in 2 s: within the bound
		}
		return rec
	}
	for _, tc := range []struct {
		name      string
		rises     []nemesis.Rise
		uncounted int64
	}{
		{"no counter rose", nil, 18},
		{"a stand-in decision counted", []nemesis.Rise{{From: start + 1900*int64(time.Millisecond), To: start + 2400*int64(time.Millisecond), Counter: 1, By: 40}}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rep := &nemesis.Report{}
			j := &nemesis.Judge{Start: start, Keys: ks, Rec: history(), Hits: 1, Rises: tc.rises, Bound: bound, Replay: replayAttempts}
			j.Run(rep)
			if rep.OverAdmittedHits != 18 || rep.OverUncounted != tc.uncounted || rep.OverCounted != 18-tc.uncounted {
				t.Errorf("over %d (uncounted %d, counted %d), want 18 (%d, %d)", rep.OverAdmittedHits, rep.OverUncounted, rep.OverCounted, tc.uncounted, 18-tc.uncounted)
			}
			if tc.uncounted > 0 && (len(rep.UncountedKeys) != 1 || !strings.HasSuffix(rep.UncountedKeys[0], "(admitted by node 2 40)")) {
				t.Errorf("uncounted keys %q, want the span's 40 admitted checks, all by node 2", rep.UncountedKeys)
			}
			if rep.Checks != 60 || rep.AdmittedHits != 50 || rep.RejectedHits != 10 {
				t.Errorf("checks %d, admitted %d, rejected %d; want 60, 50, 10", rep.Checks, rep.AdmittedHits, rep.RejectedHits)
			}
		})
	}
}

// TestWarnLine reads the time and message of a node's text-log warning,
// and nothing of other lines.
func TestWarnLine(t *testing.T) {
	line := `time=2026-11-28T00:57:50.554Z level=WARN msg="forward to peer failed; its \"checks\" go to its stand-in" peer=loadtest-2` + "\n"
	m := warnLine.FindStringSubmatch(line)
	if m == nil || m[1] != "2026-11-28T00:57:50.554Z" || !strings.HasPrefix(m[2], "forward to peer failed") {
		t.Fatalf("warnLine(%q) = %q", line, m)
	}
	for _, other := range []string{`time=2026-11-28T00:57:50.554Z level=ERROR msg="x"`, `panic: boom`, ``} {
		if m := warnLine.FindStringSubmatch(other); m != nil {
			t.Errorf("warnLine(%q) = %q, want no match", other, m)
		}
	}
}

// TestNemesisDefaults: --mode nemesis alone is a 60 s run on 3 nodes with
// its own limit, workers and call deadline; flags given still win.
func TestNemesisDefaults(t *testing.T) {
	c, err := parseFlags([]string{"--mode", "nemesis"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.local != 3 || c.duration != nemesisDuration || c.rule.Limit != nemesisLimit || c.concurrency != nemesisWorkers || c.rpcTimeout != nemesisRPCTimeout {
		t.Errorf("--mode nemesis: local %d, duration %v, limit %d, concurrency %d, rpc timeout %v; want 3, %v, %d, %d, %v",
			c.local, c.duration, c.rule.Limit, c.concurrency, c.rpcTimeout, nemesisDuration, nemesisLimit, nemesisWorkers, nemesisRPCTimeout)
	}
	c, err = parseFlags([]string{"--mode", "nemesis", "--local", "5", "--duration", "10m", "--rpc-timeout", "9s", "--faults", "kill,stop"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.local != 5 || c.duration != 10*time.Minute || c.rpcTimeout != 9*time.Second || len(c.faults) != 2 {
		t.Errorf("flags given: local %d, duration %v, rpc timeout %v, faults %v; want 5, 10m, 9s, [kill stop]", c.local, c.duration, c.rpcTimeout, c.faults)
	}
}
