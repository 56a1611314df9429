package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/shardlimiter/shardlimiter/internal/poll"
	"github.com/shardlimiter/shardlimiter/limit"
	"github.com/shardlimiter/shardlimiter/snapshot"
	"github.com/shardlimiter/shardlimiter/transport/dial"
)

// hourlyRule returns a FIXED_WINDOW rule of a whole number of hours whose
// current window has at least margin left, so that a test that counts for
// a minute does not see its window end: one hour, unless the next full
// hour is too near.
func hourlyRule(now time.Time, margin time.Duration, lim int64) limit.Rule {
	for h := time.Duration(1); ; h++ {
		p := h * time.Hour
		if end := now.Truncate(p).Add(p); end.Sub(now) >= margin {
			return limit.Rule{Algorithm: limit.FixedWindow, Limit: lim, Period: p}
		}
	}
}

// calendarRule returns a calendar FIXED_WINDOW rule, the month's unless
// it ends within margin (then the week's or the year's).
func calendarRule(now time.Time, margin time.Duration, lim int64) limit.Rule {
	c := limit.CalendarMonth
	for _, cand := range []limit.Calendar{limit.CalendarMonth, limit.CalendarWeek, limit.CalendarYear} {
		if _, end := cand.Window(now.UnixNano()); time.Duration(end-now.UnixNano()) >= margin {
			c = cand
			break
		}
	}
	return limit.Rule{Algorithm: limit.FixedWindow, Calendar: c, Period: c.Period(), Limit: lim}
}

// durableCluster is three real processes sharing one --state-dir.
type durableCluster struct {
	t     *testing.T
	bin   string
	hosts []string
	port  int
	join  string
	extra []string
	procs []*proc
}

func (c *durableCluster) start(i int) {
	c.procs[i] = startProc(c.t, c.bin, c.hosts[i], c.port, c.join, c.extra...)
}

func (c *durableCluster) converged() bool {
	// Every node ready, on a ring of the same members, waiting for no
	// partition's state: before that, a node whose ring lags may decide a key it
	// will hand over, and two states of one key merge to the larger, not
	// the sum (docs/ARCHITECTURE.md, "Handoff on join and leave").
	fingerprint := ""
	for _, p := range c.procs {
		if len(members(p)) != len(c.procs) {
			return false
		}
		resp, err := http.Get("http://" + p.http + "/v1/cluster")
		if err != nil {
			return false
		}
		var v struct {
			Ready       bool           `json:"ready"`
			Fingerprint string         `json:"members_fingerprint"`
			Handoff     map[string]int `json:"handoff"`
		}
		err = json.NewDecoder(resp.Body).Decode(&v)
		resp.Body.Close()
		if err != nil || !v.Ready || v.Handoff["incoming"] > 0 || fingerprint != "" && v.Fingerprint != fingerprint {
			return false
		}
		fingerprint = v.Fingerprint
	}
	return true
}

// stopAll sends sig to every process at once and waits for them to exit.
func (c *durableCluster) stopAll(sig syscall.Signal) {
	var wg sync.WaitGroup
	for _, p := range c.procs {
		if err := p.cmd.Process.Signal(sig); err != nil {
			c.t.Fatal(err)
		}
		wg.Go(func() { p.cmd.Wait() })
	}
	wg.Wait()
}

// consumed peeks at every key under r through node i and returns the hits
// each has consumed (limit − remaining).
func (c *durableCluster) consumed(i int, name string, r limit.Rule, keys int) ([]int64, error) {
	cl, err := dial.Dial(c.procs[i].grpc)
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	var batch []limit.Check
	for k := range keys {
		batch = append(batch, limit.Check{Name: name, Key: fmt.Sprint("tenant:", k), Rule: r})
	}
	res, err := cl.GetRateLimits(context.Background(), batch)
	if err != nil {
		return nil, err
	}
	out := make([]int64, keys)
	for k, x := range res {
		if x.Error != "" {
			return nil, fmt.Errorf("key %d: %s", k, x.Error)
		}
		out[k] = r.Limit - x.Remaining
	}
	return out, nil
}

// hit sends per[k] hits to every key under r, each batch through the next
// node, and fails the test on an error or a refusal (the limits are far).
func (c *durableCluster) hit(name string, r limit.Rule, per []int64) {
	c.t.Helper()
	clients := make([]*dial.Client, len(c.procs))
	for i, p := range c.procs {
		cl, err := dial.Dial(p.grpc)
		if err != nil {
			c.t.Fatal(err)
		}
		defer cl.Close()
		clients[i] = cl
	}
	for k, n := range per {
		for h := range n {
			res, err := clients[(k+int(h))%len(clients)].GetRateLimits(context.Background(),
				[]limit.Check{{Name: name, Key: fmt.Sprint("tenant:", k), Hits: 1, Rule: r}})
			if err != nil || res[0].Error != "" || !res[0].Allowed {
				c.t.Fatalf("%s key %d: %+v, %v", name, k, res, err)
			}
		}
	}
}

// TestStateSurvivesStopOfEveryNode: three real nodes (127.0.0.90-92) with
// --state-dir count an hour window and a calendar month window. All are
// SIGKILLed at once and restarted in another order: every key comes back
// with at least what it had at the last snapshot and at most what was
// sent. Then all are stopped with SIGTERM and restarted in a third order:
// every count is exact.
func TestStateSurvivesStopOfEveryNode(t *testing.T) {
	if testing.Short() {
		t.Skip("restarts real processes")
	}
	t.Parallel()
	c := &durableCluster{t: t, bin: buildBinary(t), hosts: []string{"127.0.0.90", "127.0.0.91", "127.0.0.92"}}
	c.port = freeGossipPort(t, c.hosts...)
	var seeds []string
	for _, h := range c.hosts {
		seeds = append(seeds, net.JoinHostPort(h, strconv.Itoa(c.port)))
	}
	c.join = strings.Join(seeds, ",")
	// Info, for the lines a stop of every node logs (checked below).
	c.extra = []string{"--state-dir", t.TempDir(), "--snapshot-interval", "1s", "--log-level", "info"}
	c.procs = make([]*proc, len(c.hosts))
	for i := range c.hosts {
		c.start(i)
	}
	poll.Until(t, 20*time.Second, c.converged, "3 nodes converge")

	const keys = 30
	rules := map[string]limit.Rule{
		"hourly":  hourlyRule(time.Now(), 5*time.Minute, 1000),
		"monthly": calendarRule(time.Now(), 5*time.Minute, 1000),
	}
	sent := map[string][]int64{}
	for name, r := range rules {
		per := make([]int64, keys)
		for k := range per {
			per[k] = int64(3 + k%5)
		}
		c.hit(name, r, per)
		sent[name] = per
	}
	// Wait for a snapshot of every node that began after those hits. A
	// node writes when something changed since its last write began, and
	// its gauge holds the write's start: one that began between a node's
	// last change and this instant holds the hits too but reads older,
	// and with nothing changed since, none follows. So one hit of a key
	// of each tenant under another rule after the instant changes every
	// node again (as owner or replica holder), and the writes that follow
	// begin after it.
	counted := float64(time.Now().UnixNano()) / 1e9
	ones := make([]int64, keys)
	for k := range ones {
		ones[k] = 1
	}
	c.hit("marker", hourlyRule(time.Now(), 5*time.Minute, 1000), ones)
	poll.Until(t, 10*time.Second, func() bool {
		for _, p := range c.procs {
			if metric(http.DefaultClient, "http://"+p.http, "shardlimiter_snapshot_last_success_timestamp_seconds") < counted+0.001 {
				return false
			}
		}
		return true
	}, "every node writes a snapshot after the hits")
	// The last interval's hits: at most these may be lost. The SIGKILL
	// follows them within milliseconds.
	last := map[string][]int64{}
	for name, r := range rules {
		per := make([]int64, keys)
		for k := range per {
			per[k] = int64(k % 3)
		}
		c.hit(name, r, per)
		last[name] = per
	}
	c.stopAll(syscall.SIGKILL)
	for _, i := range []int{2, 0, 1} {
		c.start(i)
	}
	poll.Until(t, 20*time.Second, c.converged, "3 nodes converge after the SIGKILL of all")
	for name, r := range rules {
		var got []int64
		poll.Until(t, 10*time.Second, func() bool {
			var err error
			if got, err = c.consumed(1, name, r, keys); err != nil {
				return false
			}
			for k := range got {
				if got[k] < sent[name][k] {
					return false
				}
			}
			return true
		}, "%s: every key has at least its count at the last snapshot: got %v, want at least %v", name, &got, sent[name])
		lost := int64(0)
		for k := range got {
			if max := sent[name][k] + last[name][k]; got[k] > max {
				t.Errorf("%s key %d: %d consumed after the SIGKILL of all, but only %d were sent", name, k, got[k], max)
			}
			lost += sent[name][k] + last[name][k] - got[k]
			sent[name][k] = got[k] // what the cluster holds from now on
		}
		t.Logf("%s: SIGKILL of every node lost %d hits of the %d sent after the last snapshot", name, lost, sum(last[name]))
	}

	// More hits, then a graceful stop of every node at once: exact.
	for name, r := range rules {
		per := make([]int64, keys)
		for k := range per {
			per[k] = int64(1 + k%4)
			sent[name][k] += per[k]
		}
		c.hit(name, r, per)
	}
	for _, p := range c.procs {
		var v struct {
			Snapshot *struct {
				Path string `json:"path"`
			} `json:"snapshot"`
		}
		if code := getInto(t, "http://"+p.http+"/v1/cluster", &v); code != http.StatusOK || v.Snapshot == nil || !strings.HasSuffix(v.Snapshot.Path, ".snapshot") {
			t.Errorf("%s: GET /v1/cluster = %d, snapshot %+v; want the snapshot file", p.name, code, v.Snapshot)
		}
	}
	c.stopAll(syscall.SIGTERM)
	// The log says what became of the keys: kept in the final snapshot,
	// which it names (seen: "push failed" warnings and "6 keys dropped"
	// while the snapshot kept all 6, and no line about the snapshot).
	for _, p := range c.procs {
		log := p.stderr.String()
		for _, bad := range []string{"keys dropped", `level=WARN msg="handoff: push failed"`} {
			if strings.Contains(log, bad) {
				t.Errorf("%s logged %q on a stop of every node with --state-dir:\n%s", p.name, bad, log)
			}
		}
		if !regexp.MustCompile(`msg="snapshot: final snapshot (written|unchanged since the last write, kept)" keys=[0-9]+ path=\S+\.snapshot`).MatchString(log) {
			t.Errorf("%s did not log its final snapshot with its keys and path:\n%s", p.name, log)
		}
	}
	for _, i := range []int{1, 2, 0} {
		c.start(i)
	}
	poll.Until(t, 20*time.Second, c.converged, "3 nodes converge after the SIGTERM of all")
	for name, r := range rules {
		for i := range c.procs {
			var got []int64
			poll.Until(t, 10*time.Second, func() bool {
				var err error
				got, err = c.consumed(i, name, r, keys)
				return err == nil && slices.Equal(got, sent[name])
			}, "%s through %s: counts exact after the SIGTERM of all: got %v, want %v", name, c.procs[i].name, &got, sent[name])
		}
	}
}

func sum(xs []int64) int64 {
	var s int64
	for _, x := range xs {
		s += x
	}
	return s
}

// TestDamagedSnapshotRefused: a node whose snapshot file was truncated, or
// garbled in the middle, starts without it (its counts from zero), says so
// in its log and its metrics, and serves.
func TestDamagedSnapshotRefused(t *testing.T) {
	t.Parallel()
	bin := buildBinary(t)
	host := "127.0.0.93"
	dir := t.TempDir()
	r := calendarRule(time.Now(), 5*time.Minute, 100)
	for _, damage := range []string{"truncated", "garbled"} {
		port := freeGossipPort(t, host)
		c := &durableCluster{t: t, bin: bin, hosts: []string{host}, port: port, extra: []string{"--state-dir", dir}, procs: make([]*proc, 1)}
		c.start(0)
		per := make([]int64, 20)
		for k := range per {
			per[k] = 2
		}
		c.hit("m", r, per)
		c.stopAll(syscall.SIGTERM)
		path := snapshot.Path(dir, c.procs[0].name)
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("%s: no snapshot after SIGTERM: %v", damage, err)
		}
		if damage == "truncated" {
			b = b[:len(b)/2]
		} else {
			copy(b[len(b)/2:], "garbage!")
		}
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
		c.start(0)
		got, err := c.consumed(0, "m", r, len(per))
		if err != nil {
			t.Fatalf("%s: the node does not serve: %v", damage, err)
		}
		if sum(got) != 0 {
			t.Errorf("%s: counts %v after a refused snapshot, want all 0", damage, got)
		}
		if n := metric(http.DefaultClient, "http://"+c.procs[0].http, "shardlimiter_snapshot_load_errors_total"); n != 1 {
			t.Errorf("%s: shardlimiter_snapshot_load_errors_total = %v, want 1", damage, n)
		}
		if log := c.procs[0].stderr.String(); !strings.Contains(log, "snapshot: refused") {
			t.Errorf("%s: no log line of the refusal in:\n%s", damage, log)
		}
		c.stopAll(syscall.SIGTERM)
	}
}

// getInto decodes the JSON answer of GET u into v and returns the status.
func getInto(t *testing.T, u string, v any) int {
	t.Helper()
	resp, err := http.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatalf("GET %s: %v", u, err)
	}
	return resp.StatusCode
}
