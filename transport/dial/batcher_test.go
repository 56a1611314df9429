package dial

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"

	"github.com/shardlimiter/shardlimiter/internal/poll"
	"github.com/shardlimiter/shardlimiter/limit"
	"github.com/shardlimiter/shardlimiter/transport"
)

// owner is a real Peers server (a peer listener over bufconn) whose Local checker
// records the size of every batch as it arrives and, when gated, holds each
// one until the test releases it. It answers Remaining = Hits, and every
// check a test sends has distinct Hits (see goForward), so that a caller can
// tell its own results.
type owner struct {
	target  string
	dialer  grpc.DialOption
	arrived chan int      // batch sizes, as they arrive
	gate    chan struct{} // nil: answer at once; else one token per answer
	open    sync.Once

	mu    sync.Mutex
	sizes []int
}

func newOwner(t testing.TB, gated bool) *owner {
	o := &owner{arrived: make(chan int, 1024)}
	if gated {
		o.gate = make(chan struct{})
	}
	_, o.target, o.dialer = startGRPC(t, testConfig{Checker: &fakeChecker{}, Local: transport.CheckerFunc(o.check), MaxBatch: 5000})
	t.Cleanup(o.release) // before the server stops (cleanups run last in, first out)
	return o
}

func (o *owner) check(ctx context.Context, checks []limit.Check) ([]limit.Result, error) {
	o.mu.Lock()
	o.sizes = append(o.sizes, len(checks))
	o.mu.Unlock()
	select {
	case o.arrived <- len(checks):
	default:
	}
	if o.gate != nil {
		select {
		case <-o.gate:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	results := make([]limit.Result, len(checks))
	for i, c := range checks {
		if c.Key == "bad" {
			results[i] = limit.Failed(limit.Invalid, errors.New("limit must be > 0, got 0"))
			continue
		}
		results[i] = limit.Result{Decision: limit.Decision{Allowed: true, Remaining: c.Hits}, Owner: "owner"}
	}
	return results, nil
}

// releaseOne lets one held batch answer.
func (o *owner) releaseOne() { o.gate <- struct{}{} }

// release lets every batch, held or future, answer at once.
func (o *owner) release() {
	if o.gate != nil {
		o.open.Do(func() { close(o.gate) })
	}
}

// nextArrival waits for the next batch to reach the owner.
func (o *owner) nextArrival(t testing.TB) int {
	t.Helper()
	select {
	case n := <-o.arrived:
		return n
	case <-time.After(10 * time.Second):
		t.Fatal("no batch reached the owner in 10s")
		return 0
	}
}

func (o *owner) batchSizes() []int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Clone(o.sizes)
}

func (o *owner) client(t testing.TB, cfg PeerConfig) *PeerClient {
	t.Helper()
	cfg.DialOptions = append(cfg.DialOptions, o.dialer)
	c, err := NewPeerClient(o.target, cfg)
	if err != nil {
		t.Fatalf("NewPeerClient = %v", err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// queued returns the checks waiting in c for a slot.
func queued(c *PeerClient) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, s := range c.pending {
		n += s.hi - s.lo
	}
	return n
}

// forwardResult is what one Forward returned.
type forwardResult struct {
	checks  []limit.Check
	results []limit.Result
	err     error
}

// uniqueHits numbers every check the tests forward, so that the owner's
// answer (Remaining = Hits) identifies the check it answers.
var uniqueHits atomic.Int64

// goForward runs Forward of n checks with keys prefix/0… in a goroutine.
func goForward(ctx context.Context, c *PeerClient, prefix string, n int) <-chan forwardResult {
	checks := make([]limit.Check, n)
	for i := range checks {
		checks[i] = mkCheck(fmt.Sprintf("%s/%d", prefix, i), uniqueHits.Add(1))
	}
	out := make(chan forwardResult, 1)
	go func() {
		results, err := c.Forward(ctx, checks)
		out <- forwardResult{checks, results, err}
	}()
	return out
}

// mustOwn fails unless r answers exactly its own checks, in order.
func (r forwardResult) mustOwn(t testing.TB) {
	t.Helper()
	if r.err != nil || len(r.results) != len(r.checks) {
		t.Fatalf("Forward(%d checks) = %d results, %v, want %d results", len(r.checks), len(r.results), r.err, len(r.checks))
	}
	for i, c := range r.checks {
		want := limit.Result{Decision: limit.Decision{Allowed: true, Remaining: c.Hits}, Owner: "owner"}
		if r.results[i] != want {
			t.Fatalf("Forward(%q)[%d] = %+v, want %+v", c.Key, i, r.results[i], want)
		}
	}
}

func TestPeerClientSendsAtOnce(t *testing.T) {
	t.Parallel()
	o := newOwner(t, true)
	c := o.client(t, PeerConfig{MaxInFlight: 2})
	ctx := ctxTimeout(t)
	a := goForward(ctx, c, "a", 1)
	if n := o.nextArrival(t); n != 1 {
		t.Fatalf("first RPC has %d checks, want 1", n)
	}
	b := goForward(ctx, c, "b", 2) // one slot still free: sent at once too
	if n := o.nextArrival(t); n != 2 {
		t.Fatalf("second RPC has %d checks, want 2", n)
	}
	o.release()
	(<-a).mustOwn(t)
	(<-b).mustOwn(t)
}

func TestPeerClientMergesWhileBusy(t *testing.T) {
	t.Parallel()
	o := newOwner(t, true)
	c := o.client(t, PeerConfig{MaxInFlight: 2})
	ctx := ctxTimeout(t)
	busy := []<-chan forwardResult{goForward(ctx, c, "a", 1)}
	o.nextArrival(t)
	busy = append(busy, goForward(ctx, c, "b", 1))
	o.nextArrival(t)

	const callers, each = 10, 3
	var waiting []<-chan forwardResult
	for i := range callers {
		waiting = append(waiting, goForward(ctx, c, fmt.Sprint("c", i), each))
	}
	poll.Until(t, 10*time.Second, func() bool { return queued(c) == callers*each }, "%s", "all callers queued")
	if len(o.arrived) != 0 {
		t.Fatalf("a batch was sent while every slot was busy")
	}
	o.releaseOne() // a slot frees: everything queued goes out in one RPC
	if n := o.nextArrival(t); n != callers*each {
		t.Fatalf("RPC after a slot freed has %d checks, want %d", n, callers*each)
	}
	o.release()
	for _, ch := range append(busy, waiting...) {
		(<-ch).mustOwn(t)
	}
	if got := o.batchSizes(); !slices.Equal(got, []int{1, 1, callers * each}) {
		t.Errorf("RPC sizes = %v, want [1 1 %d]", got, callers*each)
	}
}

func TestPeerClientMaxBatch(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name        string
		maxInFlight int
		blocker     bool  // hold one 1-check RPC while the calls queue
		calls       []int // checks per concurrent Forward
		want        []int // RPC sizes, sorted
	}{
		{name: "queued calls split at MaxBatch", maxInFlight: 1, blocker: true,
			calls: []int{3, 3, 3, 3, 3, 3, 3, 3, 3, 3}, want: []int{1, 6, 8, 8, 8}},
		{name: "one large call, one slot", maxInFlight: 1, calls: []int{20}, want: []int{4, 8, 8}},
		{name: "one large call, many slots", maxInFlight: 4, calls: []int{20}, want: []int{4, 8, 8}},
		{name: "exactly MaxBatch", maxInFlight: 1, calls: []int{8}, want: []int{8}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			o := newOwner(t, tt.blocker)
			c := o.client(t, PeerConfig{MaxInFlight: tt.maxInFlight, MaxBatch: 8})
			ctx := ctxTimeout(t)
			var all []<-chan forwardResult
			if tt.blocker {
				all = append(all, goForward(ctx, c, "blocker", 1))
				o.nextArrival(t)
			}
			total := 0
			for i, n := range tt.calls {
				all = append(all, goForward(ctx, c, fmt.Sprint("c", i), n))
				total += n
			}
			if tt.blocker {
				poll.Until(t, 10*time.Second, func() bool { return queued(c) == total }, "%s", "all calls queued")
				o.release()
			}
			for _, ch := range all {
				(<-ch).mustOwn(t)
			}
			got := o.batchSizes()
			slices.Sort(got)
			if !slices.Equal(got, tt.want) {
				t.Errorf("RPC sizes = %v, want %v", got, tt.want)
			}
		})
	}
}

// failedWith checks that Forward failed with kind and marked every check.
func (r forwardResult) failedWith(t testing.TB, kind error) {
	t.Helper()
	if !errors.Is(r.err, kind) {
		t.Fatalf("Forward(%d checks) error = %v, want %v", len(r.checks), r.err, kind)
	}
	if len(r.results) != len(r.checks) {
		t.Fatalf("Forward(%d checks) = %d results with %v, want one per check", len(r.checks), len(r.results), r.err)
	}
	for i, res := range r.results {
		if res.Reason != limit.Unavailable || res.Error == "" || res.Allowed {
			t.Fatalf("Forward(%q) = %+v, want an Unavailable item error", r.checks[i].Key, res)
		}
	}
}

func TestPeerClientTimeout(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewPedanticRegistry()
	o := newOwner(t, true) // never answers
	c := o.client(t, PeerConfig{Timeout: 50 * time.Millisecond, Metrics: NewMetrics(reg)})
	(<-goForward(ctxTimeout(t), c, "t", 2)).failedWith(t, transport.ErrTimeout)
	if got := sampleValue(t, reg, "shardlimiter_peer_rpc_errors_total", "reason", "timeout"); got != 1 {
		t.Errorf("shardlimiter_peer_rpc_errors_total{reason=timeout} = %v, want 1", got)
	}
}

func TestPeerClientOwnerDown(t *testing.T) {
	t.Parallel()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	_ = lis.Close()
	c, err := NewPeerClient(addr, PeerConfig{Timeout: time.Minute})
	if err != nil {
		t.Fatalf("NewPeerClient(%q) = %v", addr, err)
	}
	t.Cleanup(func() { _ = c.Close() })
	for i := range 2 { // the second call meets a channel already in backoff
		start := time.Now()
		(<-goForward(context.Background(), c, "d", 3)).failedWith(t, transport.ErrUnavailable)
		if d := time.Since(start); d > 30*time.Second {
			t.Errorf("call %d: Forward to a closed port took %v, want a quick failure (Timeout 1m)", i, d)
		}
	}
}

func TestPeerClientClose(t *testing.T) {
	t.Parallel()
	o := newOwner(t, true)
	c := o.client(t, PeerConfig{MaxInFlight: 1})
	ctx := ctxTimeout(t)
	all := []<-chan forwardResult{goForward(ctx, c, "inflight", 2)}
	o.nextArrival(t)
	for i := range 5 {
		all = append(all, goForward(ctx, c, fmt.Sprint("q", i), i+1))
	}
	poll.Until(t, 10*time.Second, func() bool { return queued(c) == 15 }, "%s", "all calls queued")
	if err := c.Close(); err != nil {
		t.Fatalf("Close = %v", err)
	}
	for _, ch := range all {
		(<-ch).failedWith(t, transport.ErrClosed)
	}
	if res, err := c.Forward(ctx, []limit.Check{mkCheck("late", 1)}); !errors.Is(err, transport.ErrClosed) || res != nil {
		t.Errorf("Forward after Close = %v, %v, want nil, transport.ErrClosed", res, err)
	}
	if err := c.Close(); err != nil {
		t.Errorf("second Close = %v, want nil", err)
	}
	if got := o.batchSizes(); !slices.Equal(got, []int{2}) {
		t.Errorf("RPC sizes = %v, want [2]: queued checks must not be sent after Close", got)
	}
}

func TestPeerClientCallerGone(t *testing.T) {
	t.Parallel()
	o := newOwner(t, true)
	c := o.client(t, PeerConfig{MaxInFlight: 1})
	a := goForward(ctxTimeout(t), c, "a", 1)
	o.nextArrival(t)
	ctx, cancel := context.WithCancel(context.Background())
	b := goForward(ctx, c, "b", 4)
	poll.Until(t, 10*time.Second, func() bool { return queued(c) == 4 }, "%s", "b queued")
	cancel()
	if r := <-b; !errors.Is(r.err, context.Canceled) || r.results != nil {
		t.Fatalf("Forward with canceled ctx = %v, %v, want nil, context.Canceled", r.results, r.err)
	}
	if n := queued(c); n != 0 {
		t.Errorf("queued after the caller left = %d, want 0", n)
	}
	o.release()
	(<-a).mustOwn(t)
	if got := o.batchSizes(); !slices.Equal(got, []int{1}) {
		t.Errorf("RPC sizes = %v, want [1]: an abandoned call is not sent", got)
	}
}

func TestPeerClientOwnerItemErrors(t *testing.T) {
	t.Parallel()
	o := newOwner(t, false)
	c := o.client(t, PeerConfig{})
	checks := []limit.Check{mkCheck("ok", 1), mkCheck("bad", 1)}
	results, err := c.Forward(ctxTimeout(t), checks)
	if err != nil {
		t.Fatalf("Forward = %v, want per-item errors only", err)
	}
	want := limit.Result{Error: "limit must be > 0, got 0", Reason: limit.Invalid}
	want.RetryAfter = 0
	if results[1] != want || results[0].Owner != "owner" {
		t.Errorf("Forward(ok, bad) = %+v, want [ok's answer, %+v]", results, want)
	}
}

func TestPeerClientConcurrent(t *testing.T) {
	t.Parallel()
	o := newOwner(t, false)
	c := o.client(t, PeerConfig{MaxInFlight: 2, MaxBatch: 16})
	ctx := ctxTimeout(t)
	var wg sync.WaitGroup
	var total atomic.Int64
	for g := range 8 {
		wg.Go(func() {
			for i := range 30 {
				n := 1 + (g*7+i)%10
				total.Add(int64(n))
				(<-goForward(ctx, c, fmt.Sprintf("g%d/%d", g, i), n)).mustOwn(t)
			}
		})
	}
	wg.Wait()
	sent := 0
	for _, n := range o.batchSizes() {
		if n > 16 {
			t.Errorf("RPC of %d checks, want at most MaxBatch 16", n)
		}
		sent += n
	}
	if int64(sent) != total.Load() {
		t.Errorf("owner got %d checks, want %d", sent, total.Load())
	}
}

func TestPeerClientCloseWhileForwarding(t *testing.T) {
	t.Parallel()
	o := newOwner(t, false)
	c := o.client(t, PeerConfig{MaxInFlight: 2, MaxBatch: 4})
	var wg sync.WaitGroup
	var answered atomic.Int64
	for g := range 6 {
		wg.Go(func() {
			for i := 0; ; i++ {
				r := <-goForward(context.Background(), c, fmt.Sprintf("g%d/%d", g, i), 1+i%5)
				if errors.Is(r.err, transport.ErrClosed) {
					return
				}
				r.mustOwn(t)
				answered.Add(1)
			}
		})
	}
	poll.Until(t, 10*time.Second, func() bool { return answered.Load() >= 20 }, "%s", "some calls answered")
	_ = c.Close()
	wg.Wait()
}

// BenchmarkPeerForward forwards from parallel callers to one owner over
// bufconn (owner included in the cost); rpcs/op shows how much the batcher
// merges once callers outnumber the MaxInFlight slots.
func BenchmarkPeerForward(b *testing.B) {
	for _, bc := range []struct{ items, parallelism int }{{1, 1}, {10, 1}, {100, 1}, {1, 16}, {10, 16}} {
		name := fmt.Sprintf("items=%d/callers=%dxGOMAXPROCS", bc.items, bc.parallelism)
		b.Run(name, func(b *testing.B) {
			o := newOwner(b, false)
			c := o.client(b, PeerConfig{})
			checks := benchChecks(bc.items)
			b.SetParallelism(bc.parallelism)
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if _, err := c.Forward(context.Background(), checks); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.ReportMetric(float64(len(o.batchSizes()))/float64(b.N), "rpcs/op")
			b.ReportMetric(float64(b.N*bc.items)/b.Elapsed().Seconds(), "checks/s")
		})
	}
}

// TestPeerClientRefusesAnOpenChain: a call whose last check is Chained
// would chain onto whatever call the batcher merges after it, failing
// another caller's check at the owner; it is refused alone, before sending.
func TestPeerClientRefusesAnOpenChain(t *testing.T) {
	t.Parallel()
	o := newOwner(t, false)
	c := o.client(t, PeerConfig{})
	open := []limit.Check{mkCheck("a", 1), mkCheck("a", 1)}
	open[1].Chained = true
	if _, err := c.Forward(ctxTimeout(t), open); !errors.Is(err, errOpenChain) {
		t.Fatalf("Forward(chain left open) = %v, want errOpenChain", err)
	}
	if res, err := c.Forward(ctxTimeout(t), []limit.Check{mkCheck("b", 1)}); err != nil || res[0].Error != "" {
		t.Fatalf("Forward after the refused call = %+v, %v; want an answer", res, err)
	}
}
