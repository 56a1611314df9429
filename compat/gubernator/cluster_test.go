package gubernatorcompat

import (
	"bufio"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	guber "github.com/gubernator-io/gubernator/v2"
)

// Three nodes: gubernator's GLOBAL cases, and a gubernator client's checks
// spread over every node, stay exact (each key is decided by its owner;
// GLOBAL changes nothing); a node leaving or crashing keeps gubernator
// keys' counts as it keeps shardlimiter's own.

// cluster starts n nodes joined to the first and returns once each counts
// all of them as peers.
func cluster(t *testing.T, prefix string, n int) []*node {
	t.Helper()
	nodes := []*node{start(t, prefix+"-0", "")}
	for i := 1; i < n; i++ {
		nodes = append(nodes, start(t, fmt.Sprintf("%s-%d", prefix, i), nodes[0].gossipAt))
	}
	awaitPeers(t, nodes, n)
	return nodes
}

// awaitPeers waits until every node of nodes reports want peers.
func awaitPeers(t *testing.T, nodes []*node, want int) {
	t.Helper()
	eventually(t, 30*time.Second, fmt.Sprintf("%d peers on every node", want), func() bool {
		for _, n := range nodes {
			h, err := n.client.HealthCheck(ctx(t), &guber.HealthCheckReq{})
			if err != nil || int(h.PeerCount) != want {
				return false
			}
		}
		return true
	})
}

func TestClusterSpreadStaysExact(t *testing.T) {
	t.Parallel()
	nodes := cluster(t, "spread", 3)
	addrs := map[string]bool{}
	for _, n := range nodes {
		addrs[n.grpc] = true
	}
	for _, alg := range []guber.Algorithm{guber.Algorithm_TOKEN_BUCKET, guber.Algorithm_LEAKY_BUCKET} {
		for _, b := range []guber.Behavior{guber.Behavior_BATCHING, guber.Behavior_GLOBAL, guber.Behavior_NO_BATCHING | guber.Behavior_MULTI_REGION} {
			const limit, perNode = 25, 20
			key := fmt.Sprintf("account:%v:%v", alg, b)
			var admitted atomic.Int64
			var owned atomic.Int64 // answers without an owner: decided by the node called
			var wg sync.WaitGroup
			for _, n := range nodes {
				wg.Go(func() {
					for range perNode {
						r := get(t, n.client, &guber.RateLimitReq{Name: "spread", UniqueKey: key, Algorithm: alg, Behavior: b,
							Duration: guber.Minute * 60, Limit: limit, Hits: 1})
						if r.Error != "" {
							t.Errorf("%s: %v", key, r)
							return
						}
						if r.Status == under {
							admitted.Add(1)
						}
						if o, ok := r.Metadata["owner"]; !ok {
							owned.Add(1)
						} else if !addrs[o] || o == n.grpc {
							t.Errorf("%s via %s: metadata owner %q, want another node's gRPC address", key, n.grpc, o)
						}
					}
				})
			}
			wg.Wait()
			if got := admitted.Load(); got != limit {
				t.Errorf("%s: admitted %d of %d spread over 3 nodes, want exactly %d", key, got, 3*perNode, limit)
			}
			if got := owned.Load(); got != perNode {
				t.Errorf("%s: %d answers name no owner, want the owner's %d", key, got, perNode)
			}
		}
	}
}

// gubernator's TestGlobalRequestMoreThanAvailable, TestGlobalNegativeHits
// and TestGlobalResetRemaining, each call through another node. gubernator
// lets GLOBAL keys over-consume until its broadcast lands; here the owner
// decides every call, so the answers are the exact ones.
func TestClusterGlobalCases(t *testing.T) {
	t.Parallel()
	nodes := cluster(t, "global", 3)
	leaky := func(key string, hits int64, b guber.Behavior) *guber.RateLimitReq {
		return &guber.RateLimitReq{Name: "global", UniqueKey: key, Algorithm: guber.Algorithm_LEAKY_BUCKET,
			Behavior: guber.Behavior_GLOBAL | b, Duration: guber.Minute * 1_000, Hits: hits, Limit: 100}
	}
	check := func(what string, n *node, r *guber.RateLimitReq, status guber.Status, remaining int64) {
		t.Helper()
		if got := get(t, n.client, r); got.Error != "" || got.Status != status || got.Remaining != remaining {
			t.Errorf("%s via %s: %v, want %v remaining %d", what, n.name, got, status, remaining)
		}
	}
	for _, n := range nodes {
		check("more than available: peek", n, leaky("more", 0, 0), under, 100)
	}
	check("50 on node 0", nodes[0], leaky("more", 50, 0), under, 50)
	check("50 on node 1", nodes[1], leaky("more", 50, 0), under, 0)
	check("50 on node 2 (exact: nothing left)", nodes[2], leaky("more", 50, 0), over, 0)
	check("one more", nodes[0], leaky("more", 1, 0), over, 0)

	check("reset remaining", nodes[0], leaky("more", 0, guber.Behavior_RESET_REMAINING), under, 100)
	check("reset seen by another node", nodes[1], leaky("more", 0, 0), under, 100)

	token := func(key string, hits, limit int64) *guber.RateLimitReq {
		return &guber.RateLimitReq{Name: "global", UniqueKey: key, Behavior: guber.Behavior_GLOBAL,
			Duration: guber.Minute * 100, Hits: hits, Limit: limit}
	}
	check("negative hits", nodes[0], token("negative", -1, 2), under, 3)
	check("negative hits", nodes[1], token("negative", -1, 2), under, 4)
	check("take all", nodes[2], token("negative", 4, 2), under, 0)
	check("peek", nodes[0], token("negative", 0, 2), under, 0)

	// TestGlobalRateLimitsPeerOverLimit: once a hit found the window
	// empty, a peek answers OVER_LIMIT too (gubernator stores the status)
	for i, c := range []struct {
		hits, remaining int64
		status          guber.Status
	}{{1, 1, under}, {1, 0, under}, {1, 0, over}, {0, 0, over}} {
		check(fmt.Sprintf("peer over limit, call %d", i), nodes[i%3], token("peer-over", c.hits, 2), c.status, c.remaining)
	}
	// TestGlobalRateLimitsWithLoadBalancing: calls spread over the nodes
	for i := range 10 {
		status := under
		if i >= 2 {
			status = over
		}
		r := get(t, nodes[i%3].client, token("balanced", 1, 2))
		if r.Error != "" || r.Status != status {
			t.Errorf("load balanced call %d via %s: %v, want %v", i, nodes[i%3].name, r, status)
		}
	}
	// TestGlobalRateLimits: remaining as gubernator's owner would answer,
	// one reset_time throughout, the owner named by the other nodes
	var reset int64
	for i, c := range []struct{ hits, remaining int64 }{{1, 4}, {2, 2}, {0, 2}, {0, 2}, {2, 0}} {
		n := nodes[i%3]
		r := get(t, n.client, token("global-rate-limits", c.hits, 5))
		if r.Error != "" || r.Status != under || r.Remaining != c.remaining || r.Limit != 5 {
			t.Errorf("global call %d via %s: %v, want remaining %d", i, n.name, r, c.remaining)
		}
		if reset == 0 {
			reset = r.ResetTime
		} else if r.ResetTime != reset {
			t.Errorf("global call %d: reset_time %d, want %d throughout", i, r.ResetTime, reset)
		}
	}
	owners := 0
	for _, n := range nodes {
		if get(t, n.client, token("global-rate-limits", 0, 5)).Metadata["owner"] == "" {
			owners++
		}
	}
	if owners != 1 {
		t.Errorf("%d nodes answer without naming an owner, want 1 (the owner)", owners)
	}
	check("global over limit", nodes[1], token("global-rate-limits", 1, 5), over, 0)
}

// spend sends hits on every key, each key through another node, and
// checks the answers.
func spend(t *testing.T, nodes []*node, reqs []*guber.RateLimitReq, hits, wantRemaining int64) {
	t.Helper()
	for i, r := range reqs {
		r.Hits = hits
		got := get(t, nodes[i%len(nodes)].client, r)
		if got.Error != "" || got.Remaining != wantRemaining {
			t.Errorf("%s/%s %v hits %d via %s: %v, want remaining %d", r.Name, r.UniqueKey, r.Algorithm, hits, nodes[i%len(nodes)].name, got, wantRemaining)
		}
	}
}

// metric reads a counter of a node's /metrics.
func metric(t *testing.T, n *node, series string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + n.http + "/metrics")
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), series+" "); ok {
			f, _ := strconv.ParseFloat(v, 64)
			return f
		}
	}
	return 0
}

const replicaSent = `shardlimiter_state_keys_sent_total{transfer="replica"}`

// A graceful leave hands the leaving node's keys to their new owners; a
// crash loses nothing replicated before it (replication every 100 ms).
// Keys of both algorithms, limit 10 per hour, keep their counts through
// both.
func TestClusterKeepsCountsOnLeaveAndCrash(t *testing.T) {
	t.Parallel()
	nodes := cluster(t, "survive", 3)
	var reqs []*guber.RateLimitReq
	for k := range 30 {
		for _, alg := range []guber.Algorithm{guber.Algorithm_TOKEN_BUCKET, guber.Algorithm_LEAKY_BUCKET} {
			// a name per algorithm: one key of two algorithms would be one
			// item that each replaces, as in gubernator
			reqs = append(reqs, &guber.RateLimitReq{Name: "survive_" + alg.String(), UniqueKey: fmt.Sprint("account:", k), Algorithm: alg,
				Duration: guber.Minute * 60, Limit: 10})
		}
	}
	spend(t, nodes, reqs, 4, 6)

	nodes[2].stop(t) // SIGTERM: hand off, then leave
	nodes = nodes[:2]
	awaitPeers(t, nodes, 2)
	spend(t, nodes, reqs, 0, 6)

	nodes = append(nodes, start(t, "survive-3", nodes[0].gossipAt))
	awaitPeers(t, nodes, 3)
	spend(t, nodes, reqs, 0, 6)

	before := 0.0
	for _, n := range nodes {
		before += metric(t, n, replicaSent)
	}
	spend(t, nodes, reqs, 1, 5)
	// every key changed once: wait until at least that many replicas went out
	eventually(t, 10*time.Second, "the changed keys replicated", func() bool {
		sum := 0.0
		for _, n := range nodes {
			sum += metric(t, n, replicaSent)
		}
		return sum >= before+float64(len(reqs))
	})
	victim := nodes[0]
	if err := victim.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	victim.cmd.Wait()
	nodes = nodes[1:]
	awaitPeers(t, nodes, 2)
	spend(t, nodes, reqs, 0, 5)
}
