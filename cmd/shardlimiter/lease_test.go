package main

import (
	"context"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shardlimiter/shardlimiter/internal/poll"
	"github.com/shardlimiter/shardlimiter/limit"
	"github.com/shardlimiter/shardlimiter/transport/dial"
)

// TestLeasesExactOnThreeProcesses runs three real binaries (127.0.0.60-62)
// with --leases, and callers on every node checking one hot TOKEN_BUCKET
// key until it is spent: the nodes decide from leases, and everything
// admitted is within the key's capacity, 0.00% over (its refill, 100 hits
// an hour, adds nothing in the few seconds of the test). Once every lease
// has ended, what is left is admitted through one node: the total is the
// under-admission the leases cost, reported.
func TestLeasesExactOnThreeProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("runs real processes")
	}
	t.Parallel()
	bin := buildBinary(t)
	hosts := []string{"127.0.0.60", "127.0.0.61", "127.0.0.62"}
	port := freeGossipPort(t, hosts...)
	var seeds []string
	for _, h := range hosts {
		seeds = append(seeds, net.JoinHostPort(h, strconv.Itoa(port)))
	}
	var procs []*proc
	for _, h := range hosts {
		procs = append(procs, startProc(t, bin, h, port, strings.Join(seeds, ","), "--leases", "--lease-threshold", "1"))
	}
	poll.Until(t, 20*time.Second, func() bool {
		for _, p := range procs {
			if len(members(p)) != 3 {
				return false
			}
		}
		return true
	}, "3 nodes converge")

	const capacity = 50_000
	r := limit.Rule{Algorithm: limit.TokenBucket, Limit: 100, Period: time.Hour, Burst: capacity}
	check := []limit.Check{{Name: "lease", Key: "hot", Hits: 1, Rule: r}}
	var sent, admitted atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for _, p := range procs {
		for range 4 {
			c, err := dial.Dial(p.grpc)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			wg.Go(func() {
				for {
					select {
					case <-stop:
						return
					default:
					}
					res, err := c.GetRateLimits(context.Background(), check)
					if err != nil || res[0].Error != "" {
						t.Errorf("check via %s: %v %+v", p.name, err, res)
						return
					}
					sent.Add(1)
					if res[0].Allowed {
						admitted.Add(1)
					}
				}
			})
		}
	}
	poll.Until(t, 120*time.Second, func() bool { return sent.Load()-admitted.Load() >= capacity/10 }, "the key is spent")
	close(stop)
	wg.Wait()
	got := admitted.Load()
	hc := &http.Client{Timeout: 5 * time.Second}
	sum := func(name string) float64 {
		s := 0.0
		for _, p := range procs {
			s += metric(hc, "http://"+p.http, name)
		}
		return s
	}
	grants, decided := sum("shardlimiter_lease_granted_total"), sum("shardlimiter_lease_decisions_total")
	if grants == 0 || decided == 0 {
		t.Fatalf("%.0f grants, %.0f checks decided from leases: the test proves nothing", grants, decided)
	}
	if got > capacity {
		t.Fatalf("admitted %d of a capacity of %d: %d over (%.2f%%)", got, capacity, got-capacity, 100*float64(got-capacity)/capacity)
	}
	poll.Until(t, 10*time.Second, func() bool {
		return sum("shardlimiter_lease_held_hits") == 0 && sum("shardlimiter_lease_granted_hits") == 0
	}, "every lease ends")
	rest := 0 // through every node: a lessee may still refuse under a deny lease
	for _, p := range procs {
		c, err := dial.Dial(p.grpc)
		if err != nil {
			t.Fatal(err)
		}
		for {
			res, err := c.GetRateLimits(context.Background(), check)
			if err != nil || !res[0].Allowed {
				break
			}
			rest++
		}
		c.Close()
	}
	if total := int(got) + rest; total > capacity {
		t.Fatalf("admitted %d under load and %d after: %d over the capacity of %d", got, rest, total-capacity, capacity)
	}
	t.Logf("leases: %.0f released and credited, %.0f expired at their lessee, %.0f renewed, %.0f deny leases",
		sum("shardlimiter_lease_released_total"), sum("shardlimiter_lease_expired_total"), sum("shardlimiter_lease_renewed_total"), sum("shardlimiter_lease_denied_total"))
	t.Logf("admitted %d of %d under load (0.00%% over; %.0f grants, %.0f checks decided from leases of %d sent), %d after the leases ended: %d under (%.2f%%)",
		got, capacity, grants, decided, sent.Load(), rest, capacity-int(got)-rest, 100*float64(capacity-int(got)-rest)/capacity)
}
