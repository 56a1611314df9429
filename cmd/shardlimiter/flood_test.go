package main

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/shardlimiter/shardlimiter/internal/poll"

	"github.com/shardlimiter/shardlimiter/limit"
	"github.com/shardlimiter/shardlimiter/transport/dial"
)

// rssBytes returns the resident set size of process pid (Linux), or -1.
func rssBytes(pid int) int64 {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return -1
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10
		}
	}
	return -1
}

// TestMemoryBudgetHoldsUnderFloods runs key floods against the real binary
// with --max-memory (docs/PERFORMANCE.md, "A node-wide byte budget"): long keys in two tables, and sliding logs
// with the largest limit and hits, a 366-day period. Without a budget the
// first held 770 MB per table and the second 768 MB per request. Here the
// process stays under the budget plus a stated margin throughout, keys are
// evicted for bytes, a well-behaved key keeps its exact count, and the
// tables give their bytes back once the flood's keys expire.
func TestMemoryBudgetHoldsUnderFloods(t *testing.T) {
	if _, err := os.Stat("/proc/self/status"); err != nil {
		t.Skip("needs /proc to read the resident set size")
	}
	t.Parallel()
	const (
		maxMemory = 128 << 20
		// The margin over --max-memory: the process's binary, stacks
		// and the allocator's slack that the soft limit does not see.
		margin = 64 << 20
		// longLife is the period of the flood's long keys (see below).
		longLife = 20 * time.Second
	)
	bin := buildBinary(t)
	p := startProc(t, bin, "127.0.0.1", freeGossipPort(t, "127.0.0.1"), "", "--max-memory", strconv.Itoa(maxMemory))
	url := "http://" + p.http
	c, err := dial.Dial(p.grpc)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()

	steady := limit.Check{Name: "steady", Key: "account:42", Hits: 1,
		Rule: limit.Rule{Algorithm: limit.FixedWindow, Limit: 1000, Period: time.Hour}}
	admitted, steadyChecks := 0, 0
	var peak int64
	send := func(batch []limit.Check) {
		t.Helper()
		res, err := c.GetRateLimits(ctx, append(batch, steady))
		if err != nil {
			t.Fatalf("GetRateLimits: %v", err)
		}
		for i, r := range res {
			if r.Error != "" {
				t.Fatalf("item %d: error %q", i, r.Error)
			}
		}
		steadyChecks++
		if res[len(res)-1].Allowed {
			admitted++
		}
		if rss := rssBytes(p.cmd.Process.Pid); rss > peak {
			peak = rss
		}
	}

	// Long keys, two tables: 200k keys of 1 KiB, ~220 MB unbounded. They
	// live 20 s, so that the budget fills even when a busy machine sends
	// the batches slowly: the budget (64 MiB) fills only when more than it
	// arrives within one key's life. With 1 s the sweep freed them as fast
	// as a slow flood came, and with 5 s a flood of 44 s (load average 8
	// on 2 cores) never filled it: no eviction for bytes, a flake.
	pad := strings.Repeat("k", limit.MaxKeyLen-12)
	algs := []limit.Algorithm{limit.FixedWindow, limit.TokenBucket}
	batch := make([]limit.Check, 0, 1001)
	for i := range 200 {
		batch = batch[:0]
		for j := range 999 {
			batch = append(batch, limit.Check{Name: "long", Key: fmt.Sprintf("%s%010d", pad, i*999+j), Hits: 1,
				Rule: limit.Rule{Algorithm: algs[j%2], Limit: 10, Period: longLife}})
		}
		send(batch)
	}
	// Sliding logs: the largest limit, all of it in one take, for a year.
	for i := range 50 {
		batch = batch[:0]
		for j := range 999 {
			batch = append(batch, limit.Check{Name: "log", Key: fmt.Sprintf("log:%d:%d", i, j), Hits: limit.MaxLogLimit,
				Rule: limit.Rule{Algorithm: limit.SlidingLog, Limit: limit.MaxLogLimit, Period: limit.MaxPeriod}})
		}
		send(batch)
	}
	t.Logf("peak RSS %.1f MiB with --max-memory %d MiB; evicted for bytes %v, table bytes %v",
		float64(peak)/(1<<20), maxMemory>>20, metric(http.DefaultClient, url, "shardlimiter_table_evictions_total", `cause="bytes"`),
		metric(http.DefaultClient, url, "shardlimiter_table_bytes"))
	if peak > maxMemory+margin {
		t.Errorf("peak RSS %d MiB, want <= %d MiB (--max-memory %d MiB + %d MiB margin)", peak>>20, (maxMemory+margin)>>20, maxMemory>>20, margin>>20)
	}
	if want := min(steadyChecks, 1000); admitted != want {
		t.Errorf("the steady key admitted %d of %d checks at limit 1000 during the floods, want %d", admitted, steadyChecks, want)
	}
	if n := metric(http.DefaultClient, url, "shardlimiter_table_evictions_total", `cause="bytes"`); n <= 0 {
		t.Errorf("no key was evicted for bytes (evictions %v)", n)
	}
	budget := metric(http.DefaultClient, url, "shardlimiter_table_budget_bytes")
	if held := metric(http.DefaultClient, url, "shardlimiter_table_bytes"); budget <= 0 || held > budget*9/8 {
		t.Errorf("tables hold %v bytes against a budget of %v", held, budget)
	}
	// The long keys go idle longLife after their last hit and the sweep
	// frees them; what stays is the logs (a year) and the steady key.
	longBytes := func() float64 {
		return metric(http.DefaultClient, url, "shardlimiter_table_bytes", `algorithm="TOKEN_BUCKET"`)
	}
	poll.Until(t, longLife+30*time.Second, func() bool { return longBytes() < 1<<10 },
		"TOKEN_BUCKET still holds %v bytes after its keys expired", longBytes())
}

// TestMemoryBudgetFollowsTheFlagAtRestart: changing --max-memory alone and
// restarting changes the tables' budget (half of it) and nothing else.
func TestMemoryBudgetFollowsTheFlagAtRestart(t *testing.T) {
	t.Parallel()
	bin := buildBinary(t)
	for _, mib := range []int{64, 96} {
		p := startProc(t, bin, "127.0.0.1", freeGossipPort(t, "127.0.0.1"), "", "--max-memory", fmt.Sprintf("%dMiB", mib))
		url := "http://" + p.http
		if got, want := metric(http.DefaultClient, url, "shardlimiter_table_budget_bytes"), float64(mib<<20)/2; got != want {
			t.Errorf("--max-memory %dMiB: table budget %v bytes, want %v", mib, got, want)
		}
		if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		if err := p.cmd.Wait(); err != nil {
			t.Fatalf("--max-memory %dMiB: exit after SIGTERM: %v", mib, err)
		}
	}
}
