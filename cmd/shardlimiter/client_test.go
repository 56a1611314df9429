package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/shardlimiter/shardlimiter/client"
	"github.com/shardlimiter/shardlimiter/internal/poll"
	"github.com/shardlimiter/shardlimiter/limit"
	"github.com/shardlimiter/shardlimiter/transport/dial"
)

// forwarded is the checks p has forwarded to other nodes.
func forwarded(p *proc) float64 {
	return metric(http.DefaultClient, "http://"+p.http, "shardlimiter_peer_forwarded_checks_total")
}

// TestClientAgainstThreeProcesses runs the owner-aware client against
// three processes of the binary (127.0.0.50-52), configured with one
// address only: once its ring has settled every check goes straight to its
// owner (no node forwards any), answers are exact per key under concurrent
// callers, and a node killed with SIGKILL, then a node added, cost the
// callers no error.
func TestClientAgainstThreeProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("runs real processes")
	}
	t.Parallel()
	bin := buildBinary(t)
	hosts := []string{"127.0.0.50", "127.0.0.51", "127.0.0.52", "127.0.0.53"}
	port := freeGossipPort(t, hosts...)
	seed := net.JoinHostPort(hosts[0], strconv.Itoa(port))
	var procs []*proc
	for _, h := range hosts[:3] {
		procs = append(procs, startProc(t, bin, h, port, seed))
	}
	converged := func(n int) func() bool {
		return func() bool {
			for _, p := range procs {
				if len(members(p)) != n {
					return false
				}
			}
			return true
		}
	}
	poll.Until(t, 20*time.Second, converged(3), "3 nodes converge")

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := client.New(ctx, client.Config{Targets: []string{procs[0].grpc}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	poll.Until(t, 10*time.Second, func() bool { return len(c.Members()) == 3 }, "the client's ring has 3 members: %v", c.Members())

	before := make([]float64, len(procs))
	for i, p := range procs {
		before[i] = forwarded(p)
	}
	// Exactness: 40 keys × 15 hits of one each, from 32 concurrent callers.
	const keys, perKey, hits, callers = 40, 10, 15, 32
	rule := limit.Rule{Algorithm: limit.SlidingLog, Limit: perKey, Period: time.Hour}
	var admitted [keys]atomic.Int64
	var owners sync.Map
	var wg sync.WaitGroup
	for g := range callers {
		wg.Go(func() {
			for n := g; n < keys*hits; n += callers {
				k := n % keys
				r, err := c.Check(ctx, limit.Check{Name: "direct", Key: fmt.Sprint("account:", k), Hits: 1, Rule: rule})
				if err != nil {
					t.Errorf("Check(account:%d) = %v", k, err)
					return
				}
				owners.Store(r.Owner, true)
				if r.Allowed {
					admitted[k].Add(1)
				}
			}
		})
	}
	wg.Wait()
	for k := range keys {
		if n := admitted[k].Load(); n != perKey {
			t.Errorf("account:%d: admitted %d of %d, want exactly %d", k, n, hits, perKey)
		}
	}
	seen := 0
	owners.Range(func(any, any) bool { seen++; return true })
	if seen != 3 {
		t.Errorf("%d nodes decided, want all 3", seen)
	}
	for i, p := range procs {
		if d := forwarded(p) - before[i]; d != 0 {
			t.Errorf("%s forwarded %v checks: the client did not send them to their owners", p.name, d)
		}
	}

	// The metric does count forwards: a plain connection to one node sends
	// it keys that others own.
	plain, err := dial.Dial(procs[0].grpc)
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	var batch []limit.Check
	for k := range keys {
		batch = append(batch, limit.Check{Name: "plain", Key: fmt.Sprint("account:", k), Hits: 1, Rule: rule})
	}
	if _, err := plain.GetRateLimits(ctx, batch); err != nil {
		t.Fatal(err)
	}
	if forwarded(procs[0]) <= before[0] {
		t.Errorf("%s forwarded nothing for a plain connection: the metric proves nothing", procs[0].name)
	}

	// Churn: callers keep checking while a node is killed and another added.
	var errs, done atomic.Int64
	stop := make(chan struct{})
	for g := range 8 {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				key := fmt.Sprintf("churn:%d:%d", g, i%50)
				_, err := c.Check(ctx, limit.Check{Name: "churn", Key: key, Hits: 1, Rule: limit.Rule{Limit: 1 << 20, Period: time.Second}})
				if err != nil {
					if errs.Add(1) <= 5 {
						t.Errorf("during churn, Check(%s) = %v", key, err)
					}
				}
				done.Add(1)
			}
		})
	}
	progress := func(what string) {
		n := done.Load()
		poll.Until(t, 10*time.Second, func() bool { return done.Load() > n+100 }, "checks continue %s", what)
	}
	progress("before the kill")
	if err := procs[2].cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	procs = procs[:2]
	poll.Until(t, 20*time.Second, func() bool { return converged(2)() && len(c.Members()) == 2 }, "the cluster and the client drop the killed node: %v", c.Members())
	progress("after the kill")
	procs = append(procs, startProc(t, bin, hosts[3], port, seed))
	poll.Until(t, 20*time.Second, func() bool { return converged(3)() && len(c.Members()) == 3 }, "the cluster and the client add the new node: %v", c.Members())
	progress("after the join")
	close(stop)
	wg.Wait()
	t.Logf("%d checks through the churn, %d errors; client ring %v", done.Load(), errs.Load(), c.Members())
	if !slices.Contains(c.Members(), procs[2].name) {
		t.Errorf("client ring %v lacks the new node %s", c.Members(), procs[2].name)
	}
}
