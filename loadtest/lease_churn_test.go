package main

import (
	"fmt"
	"slices"
	"strconv"
	"testing"

	"github.com/shardlimiter/shardlimiter/ring"
)

// The runs below check leases (the servers' --leases) on real processes
// through churn: hot TOKEN_BUCKET keys checked through every node, at a
// rate the owner's lessees decide most of, while the key's owner moves.
// The rule holds 3000 hits and refills 100 an hour, so each key is spent
// in about 4 s and the bound is its capacity: what is admitted past it is
// over-admission, what the exact replay admits and the cluster did not is
// under-admission. The keys are chosen (by the run's seed) so that the
// events hit the nodes that matter: the ring is by node name, and the
// tool names its nodes loadtest-1, loadtest-2, ….
var leaseChurnArgs = []string{"--mode", "accuracy", "--algorithm", "TOKEN_BUCKET",
	"--limit", "100", "--period", "1h", "--burst", "3000", "--duration", "6s",
	"--local-flag=--leases"}

// leaseChurnRate is the attempts per second of one key: 300 through each
// of 3 nodes, above the servers' default --lease-threshold of 100.
const leaseChurnRate = 900

// ownerOf returns the node owning key in a ring of the tool's nodes nums.
func ownerOf(t *testing.T, key string, nums ...int) int {
	t.Helper()
	var ms []ring.Member
	for _, n := range nums {
		ms = append(ms, ring.Member{Name: nodeName(n)})
	}
	s, err := ring.New(ms, 0, ring.Config{})
	if err != nil {
		t.Fatal(err)
	}
	n, _ := strconv.Atoi(s.Owner(key).Name[len("loadtest-"):])
	return n
}

// seedWhere returns the first seed whose run's keys of algorithm alg
// satisfy ok.
func seedWhere(t *testing.T, alg string, keys int, ok func(keys []string) bool) uint64 {
	t.Helper()
	for seed := uint64(1); seed < 10_000; seed++ {
		if ok(keyNames(fmt.Sprintf("lt-%s-%s-", runID(seed), alg), keys)) {
			return seed
		}
	}
	t.Fatal("no seed fits")
	return 0
}

// TestLeasesExactThroughGracefulChurn moves a leased key's ownership
// three times, gracefully: node 2 owns it, node 4 joins and takes it,
// node 4 leaves and hands it back, node 2 leaves and hands it on. Each
// move carries the debits of the outstanding leases: nothing is admitted
// past the bound.
func TestLeasesExactThroughGracefulChurn(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a cluster with churn for 6 s")
	}
	seed := seedWhere(t, "TOKEN_BUCKET", 1, func(k []string) bool {
		return ownerOf(t, k[0], 1, 2, 3) == 2 && ownerOf(t, k[0], 1, 2, 3, 4) == 4
	})
	r := runJSON(t, append([]string{"--local", "3", "--server-bin", serverBin(t), "--keys", "1",
		"--seed", strconv.FormatUint(seed, 10), "--rate", strconv.Itoa(leaseChurnRate),
		"--churn", "600ms:join,1200ms:leave=4,1800ms:leave=2"}, leaseChurnArgs...)...)
	a := leaseChurnVerdict(t, r, 1, 3)
	k := a.PerKey[0]
	if k.OverAdmitted != 0 {
		t.Errorf("key %s (owner moved 2 → 4 → 2 → another): admitted %d hits, bound %d: %d over, want 0", k.Key, k.Admitted, k.Bound, k.OverAdmitted)
	}
	t.Logf("graceful churn: admitted %d, bound %d, exact replay %d: under-admitted %d hits (%.2f%%), %d checks failed (sent to a node gone)",
		k.Admitted, k.Bound, k.Expected, k.UnderAdmitted, pct(k.UnderAdmitted, k.Expected), k.Failed)
}

// TestLeasesThroughSIGKILL kills node 3, which owns key 0 and holds a
// lease of key 1 (owned by node 1). Key 1 loses at most the lease node 3
// held (under-admission), and is never over its bound. Key 0's owner
// dies: the grants it made are in its replica holder's state (a grant is
// answered once replicated), but the checks it decided itself in its last
// replication interval are lost with it, as they are without leases: at
// most an interval's attempts over.
func TestLeasesThroughSIGKILL(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a cluster with a kill for 6 s")
	}
	seed := seedWhere(t, "TOKEN_BUCKET", 2, func(k []string) bool {
		return ownerOf(t, k[0], 1, 2, 3) == 3 && ownerOf(t, k[1], 1, 2, 3) == 1
	})
	r := runJSON(t, append([]string{"--local", "3", "--server-bin", serverBin(t), "--keys", "2",
		"--seed", strconv.FormatUint(seed, 10), "--rate", strconv.Itoa(2 * leaseChurnRate),
		"--churn", "1500ms:kill=3"}, leaseChurnArgs...)...)
	a := leaseChurnVerdict(t, r, 2, 1)
	owner, lessee := a.PerKey[0], a.PerKey[1]
	// One replication interval (the servers' default, 100 ms) of the key's
	// attempts.
	const interval = leaseChurnRate / 10
	if owner.OverAdmitted > interval {
		t.Errorf("key %s (owner killed): %d hits over the bound %d, want at most one replication interval's attempts, %d", owner.Key, owner.OverAdmitted, owner.Bound, interval)
	}
	if lessee.OverAdmitted != 0 {
		t.Errorf("key %s (a lessee killed): admitted %d hits, bound %d: %d over, want 0", lessee.Key, lessee.Admitted, lessee.Bound, lessee.OverAdmitted)
	}
	// A lessee asks for its rate (300/s) × 200 ms, 60 hits, and renews at
	// half of its grant, pooling the two: it holds about a hundred hits
	// (180-200 measured lost, with the releases the other lessee's
	// expiries could not make meanwhile). 15% of the capacity leaves room
	// for a loaded machine.
	if lessee.UnderAdmitted > 450 {
		t.Errorf("key %s (a lessee killed): under-admitted %d hits, want at most 450", lessee.Key, lessee.UnderAdmitted)
	}
	for _, k := range a.PerKey {
		t.Logf("kill: key %s: admitted %d, bound %d (over %d), exact replay %d (under %d, %.2f%%), %d checks failed",
			k.Key, k.Admitted, k.Bound, k.OverAdmitted, k.Expected, k.UnderAdmitted, pct(k.UnderAdmitted, k.Expected), k.Failed)
	}
}

// leaseChurnVerdict checks that the run did its churn and returns its
// verdict, with keys keys listed and events events.
func leaseChurnVerdict(t *testing.T, r *result, keys, events int) *algAccuracy {
	t.Helper()
	if len(r.Accuracy) != 1 || r.Accuracy[0].Churn == nil || len(r.Accuracy[0].PerKey) != keys {
		t.Fatalf("report: %+v, want one algorithm with churn and %d keys", r, keys)
	}
	a := r.Accuracy[0]
	if r.ChurnFailed || len(a.Churn.Events) != events || slices.ContainsFunc(a.Churn.Events, func(e churnRecord) bool { return e.Error != "" }) {
		t.Fatalf("churn: %+v, want %d events done", a.Churn, events)
	}
	if a.ExpectedHits < 3000*int64(keys) {
		t.Fatalf("an exact limiter would have admitted %d hits of %d keys of 3000: the run did not spend its keys", a.ExpectedHits, keys)
	}
	return a
}

// TestLeasesExactForWindowsThroughGracefulChurn is the graceful churn for
// FIXED_WINDOW and SLIDING_WINDOW: 3000 hits an hour (a window aligned to
// the hour; a run across an hour's end has a bound of two windows), the
// same moves of the owner. A grant takes from the current window, and
// the handoff carries the window's count: nothing over the bound.
func TestLeasesExactForWindowsThroughGracefulChurn(t *testing.T) {
	if testing.Short() {
		t.Skip("runs two clusters with churn for 6 s each")
	}
	for _, alg := range []string{"FIXED_WINDOW", "SLIDING_WINDOW"} {
		seed := seedWhere(t, alg, 1, func(k []string) bool {
			return ownerOf(t, k[0], 1, 2, 3) == 2 && ownerOf(t, k[0], 1, 2, 3, 4) == 4
		})
		r := runJSON(t, "--local", "3", "--server-bin", serverBin(t), "--keys", "1", "--mode", "accuracy", "--algorithm", alg,
			"--limit", "3000", "--period", "1h", "--duration", "6s", "--local-flag=--leases",
			"--seed", strconv.FormatUint(seed, 10), "--rate", strconv.Itoa(leaseChurnRate),
			"--churn", "600ms:join,1200ms:leave=4,1800ms:leave=2")
		a := leaseChurnVerdict(t, r, 1, 3)
		k := a.PerKey[0]
		// Two nodes counting a key side by side through graceful churn
		// (docs/RELIABILITY.md, "Deviations found") gave 1 to 47 hits
		// over in about one run in four until its causes were fixed;
		// 0 in 47 runs since, so leases are on by default and not one
		// hit over is allowed.
		if k.OverAdmitted > 0 {
			t.Errorf("%s: key %s (owner moved 2 → 4 → 2 → another): admitted %d hits, bound %d: %d over", alg, k.Key, k.Admitted, k.Bound, k.OverAdmitted)
		}
		t.Logf("%s graceful churn: admitted %d, bound %d, exact replay %d: under-admitted %d hits (%.2f%%)",
			alg, k.Admitted, k.Bound, k.Expected, k.UnderAdmitted, pct(k.UnderAdmitted, k.Expected))
	}
}
