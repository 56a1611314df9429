package dial

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shardlimiter/shardlimiter/transport"

	"google.golang.org/grpc"

	"github.com/shardlimiter/shardlimiter/limit"
)

// groupOwner is a Peers server that checks every batch it receives for
// groups cut at its edges: each check of a group is named "i/n" (its place
// in a group of n), so a group's tail or head arriving alone shows.
type groupOwner struct {
	batches, cut atomic.Int64
	mu           sync.Mutex
	firstCut     string
}

func (o *groupOwner) check(_ context.Context, checks []limit.Check) ([]limit.Result, error) {
	o.batches.Add(1)
	results := make([]limit.Result, len(checks))
	for i := 0; i < len(checks); {
		end := limit.GroupEnd(checks, i)
		if err := wholeGroup(checks[i:end]); err != nil {
			o.cut.Add(1)
			o.mu.Lock()
			if o.firstCut == "" {
				o.firstCut = fmt.Sprintf("batch of %d, checks [%d,%d): %v", len(checks), i, end, err)
			}
			o.mu.Unlock()
			for j := i; j < end; j++ {
				results[j] = limit.Failed(limit.Invalid, err)
			}
		}
		for j := i; j < end; j++ {
			if results[j].Error == "" {
				results[j] = limit.Result{Decision: limit.Decision{Allowed: true, Remaining: checks[j].Hits}, Owner: "owner"}
			}
		}
		i = end
	}
	return results, nil
}

// wholeGroup reports whether g is a whole group as its caller sent it.
func wholeGroup(g []limit.Check) error {
	for i, c := range g {
		at, n, _ := strings.Cut(c.Name, "/")
		if at != strconv.Itoa(i) || n != strconv.Itoa(len(g)) || c.Key != g[0].Key {
			return fmt.Errorf("check %d is %q of %q: a group cut by the batcher", i, c.Name, c.Key)
		}
	}
	if err := limit.ValidateGroup(g); err != nil {
		return err
	}
	return nil
}

// groupedChecks is a call of up to 40 checks: single checks and groups of
// 2 to limit.MaxGroup checks, in random order.
func groupedChecks(r *rand.Rand, caller, call int) []limit.Check {
	var checks []limit.Check
	for g := 0; len(checks) < 40 && (g == 0 || r.IntN(8) > 0); g++ {
		n := 1
		if r.IntN(2) == 0 {
			n = 2 + r.IntN(limit.MaxGroup-1)
		}
		key := fmt.Sprintf("c%d/%d/%d", caller, call, g)
		for i := range n {
			c := mkCheck(key, uniqueHits.Add(1))
			c.Name = fmt.Sprintf("%d/%d", i, n)
			c.Chained = i < n-1
			checks = append(checks, c)
		}
	}
	return checks
}

// TestPeerClientKeepsGroups: many callers whose calls hold groups, merged
// into batches of at most 50 while one slot is busy: no group ever spans
// two RPCs, every check is answered by the owner, and batches do merge.
func TestPeerClientKeepsGroups(t *testing.T) {
	t.Parallel()
	o := &groupOwner{}
	_, target, dialer := startGRPC(t, testConfig{Checker: &fakeChecker{}, Local: transport.CheckerFunc(o.check), MaxBatch: 5000})
	// A long Timeout: 1,280 calls through one slot under -race on a busy
	// machine once took more than the default second for an RPC.
	c, err := NewPeerClient(target, PeerConfig{MaxInFlight: 1, MaxBatch: 50, Timeout: 20 * time.Second, DialOptions: []grpc.DialOption{dialer}})
	if err != nil {
		t.Fatalf("NewPeerClient = %v", err)
	}
	t.Cleanup(func() { _ = c.Close() })
	ctx := ctxTimeout(t)

	const callers, calls = 32, 40
	var wg sync.WaitGroup
	var checks atomic.Int64
	for caller := range callers {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(1, uint64(caller)))
			for call := range calls {
				in := groupedChecks(r, caller, call)
				checks.Add(int64(len(in)))
				out, err := c.Forward(ctx, in)
				if err != nil || len(out) != len(in) {
					t.Errorf("Forward(%d checks) = %d results, %v", len(in), len(out), err)
					return
				}
				for i := range in {
					if out[i].Error != "" || out[i].Remaining != in[i].Hits {
						t.Errorf("Forward(%q %s)[%d] = %+v, want its own answer", in[i].Key, in[i].Name, i, out[i])
						return
					}
				}
			}
		})
	}
	wg.Wait()
	if n := o.cut.Load(); n > 0 {
		o.mu.Lock()
		defer o.mu.Unlock()
		t.Fatalf("%d groups reached the owner cut; first: %s", n, o.firstCut)
	}
	if b := o.batches.Load(); b >= callers*calls {
		t.Errorf("%d RPCs for %d calls: the batcher never merged calls, so the test proves nothing", b, callers*calls)
	}
	t.Logf("%d checks in %d RPCs", checks.Load(), o.batches.Load())
}

// TestCallCut: where a batch with room up to hi ends a call's checks.
func TestCallCut(t *testing.T) {
	t.Parallel()
	// checks 0; group 1-3; group 4-19 (limit.MaxGroup); a chain of 20-39 too long.
	var checks []limit.Check
	chain := func(n int) {
		for i := range n {
			c := mkCheck("k", 1)
			c.Chained = i < n-1
			checks = append(checks, c)
		}
	}
	chain(1)
	chain(3)
	chain(limit.MaxGroup)
	chain(20)
	cl, err := newCall(checks)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ lo, hi, want int }{
		{0, 1, 1}, {0, 2, 1}, {0, 3, 1}, {0, 4, 4}, {0, 5, 4}, {0, 19, 4}, {0, 20, 20},
		{4, 19, 4},   // the group at lo does not fit
		{5, 10, 5},   // a group that started before lo: nothing fits
		{20, 30, 20}, // the too-long chain starts at lo
		{22, 39, 39}, // no group start within MaxGroup-1 back: invalid anyway, cut
	} {
		if got := cl.cut(tc.lo, tc.hi); got != tc.want {
			t.Errorf("cut(%d, %d) = %d, want %d", tc.lo, tc.hi, got, tc.want)
		}
	}
	if plain, _ := newCall(checks[:1]); plain.chained != nil || plain.cut(0, 1) != 1 {
		t.Errorf("a call without groups keeps no chained flags")
	}
}
