package main

import (
	"bytes"
	"context"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestParseChurnPlansTheSchedule(t *testing.T) {
	t.Parallel()
	sec := time.Second
	for _, tc := range []struct {
		spec string
		want []churnEvent
	}{
		{"6s:join,14s:leave=2,22s:restart=2", []churnEvent{
			{at: 6 * sec, kind: churnJoin, node: 4}, {at: 14 * sec, kind: churnLeave, node: 2}, {at: 22 * sec, kind: churnRestart, node: 2},
		}},
		{"10s:kill=2", []churnEvent{{at: 10 * sec, kind: churnKill, node: 2}}},
		{"5s:stop=2/10s", []churnEvent{{at: 5 * sec, kind: churnStop, node: 2, pause: 10 * sec}}},
		// Time order, whatever the spec's; a join numbered in that order
		// can be churned afterwards.
		{" 20s:kill=4 , 1.5s:join,500ms:stop=3/1s", []churnEvent{
			{at: 500 * time.Millisecond, kind: churnStop, node: 3, pause: sec}, {at: 1500 * time.Millisecond, kind: churnJoin, node: 4}, {at: 20 * sec, kind: churnKill, node: 4},
		}},
		// A stopped node runs again after its pause.
		{"1s:stop=2/1s,2100ms:leave=2", []churnEvent{
			{at: sec, kind: churnStop, node: 2, pause: sec}, {at: 2100 * time.Millisecond, kind: churnLeave, node: 2},
		}},
	} {
		got, err := parseChurn(tc.spec, 3, 32*sec)
		if err != nil {
			t.Errorf("parseChurn(%q) = %v", tc.spec, err)
			continue
		}
		for i := range got {
			got[i].part = ""
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("parseChurn(%q) = %+v, want %+v", tc.spec, got, tc.want)
		}
	}
}

func TestParseChurnNamesTheBadPart(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ spec, want string }{
		{"6s", `"6s": want OFFSET:EVENT`},
		{"6s:join,", `--churn "": want OFFSET:EVENT`},
		{"six:join", `offset "six"`},
		{"-1s:join", `offset "-1s"`},
		{"6s:crash=2", `unknown event "crash"`},
		{"6s:join=4", "join takes no node number"},
		{"6s:leave", "leave needs a node number"},
		{"6s:kill=two", `node "two"`},
		{"6s:stop=2", "stop=I/D: want a node and a pause"},
		{"6s:stop=2/0s", `stop pause "0s"`},
		{"6s:leave=1", `"6s:leave=1": node 1 is the entry node`},
		{"6s:kill=4", "node 4 does not exist at 6s (3 nodes by then"},
		{"6s:restart=2", "node 2 is running at 6s"},
		{"6s:kill=2,8s:leave=2", `"8s:leave=2": node 2 is not running at 8s`},
		{"6s:stop=2/5s,8s:kill=2", "node 2 is stopped until 11s"},
		{"30s:stop=2/5s", "the stop ends at 35s, after the run's --duration 32s"},
		{"32s:join", "at 32s, not within the run's --duration 32s"},
	} {
		_, err := parseChurn(tc.spec, 3, 32*time.Second)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("parseChurn(%q) = %v, want an error containing %q", tc.spec, err, tc.want)
		}
	}
}

func TestChurnFlagApplies(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args       []string
		want       string // "" = valid
		algorithms int    // when valid
	}{
		{[]string{"--local", "3", "--mode", "accuracy", "--churn", "1s:join"}, "", 1},
		{[]string{"--local", "3", "--churn", "1s:join"}, "--churn: applies to --mode accuracy with a --local cluster", 0},
		{[]string{"--targets", "a:1", "--mode", "accuracy", "--churn", "1s:join"}, "--churn: applies to", 0},
		{[]string{"--local", "3", "--calibrate", "--mode", "accuracy", "--churn", "1s:join"}, "leave out --calibrate", 0},
		{[]string{"--local", "3", "--mode", "accuracy", "--churn", "5s:join"}, "not within the run's --duration 4s", 0},
		{[]string{"--local", "3", "--mode", "accuracy", "--algorithm", "TOKEN_BUCKET,sliding_window"}, "", 2},
		{[]string{"--local", "3", "--mode", "accuracy", "--algorithm", "TOKEN_BUCKET,GCRA"}, `unknown algorithm "GCRA"`, 0},
		{[]string{"--local", "3", "--mode", "accuracy", "--algorithm", "FIXED_WINDOW,fixed_window"}, "FIXED_WINDOW is listed twice", 0},
		{[]string{"--local", "3", "--algorithm", "TOKEN_BUCKET,FIXED_WINDOW"}, "accuracy mode only", 0},
	} {
		c, err := parseFlags(tc.args, &bytes.Buffer{})
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%v: %v", tc.args, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%v: error %v, want one containing %q", tc.args, err, tc.want)
		case tc.want == "" && len(c.algorithms) != tc.algorithms:
			t.Errorf("%v: algorithms %v, want %d", tc.args, c.algorithms, tc.algorithms)
		}
	}
	var stdout, stderr bytes.Buffer
	if code := run(context.Background(), []string{"--local", "3", "--mode", "accuracy", "--churn", "1s:leave=1"}, &stdout, &stderr); code != exitUsage || !strings.Contains(stderr.String(), "node 1 is the entry node") {
		t.Errorf("churning node 1: exit %d, stderr %q; want %d and a message naming node 1", code, stderr.String(), exitUsage)
	}
}
