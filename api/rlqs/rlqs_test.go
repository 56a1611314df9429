package rlqs

import (
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/shardlimiter/shardlimiter/quota"
	"github.com/shardlimiter/shardlimiter/rules"
	"github.com/shardlimiter/shardlimiter/transport/server"
	"github.com/shardlimiter/shardlimiter/transport/transporttest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const testRules = `domain: edge
rlqs:
  default: allow
  buckets:
    - name: per_tenant
      entries: [{key: tenant}]
      rate_limit: {unit: second, requests_per_unit: 100}
`

func testStore(t testing.TB) *rules.Store {
	t.Helper()
	set, err := rules.Parse("rules.yaml", []byte(testRules))
	if err != nil {
		t.Fatal(err)
	}
	return rules.NewStore(set)
}

// routeTo sends every matched bucket to one owner.
type routeTo struct {
	addr string
	self bool
}

func (r routeTo) Owner(string) (string, bool) { return r.addr, r.self }

func (r routeTo) Backup(string) (string, bool) { return "", false }

func (r routeTo) RingVersion() uint64 { return 0 }

// serve runs svc's client and peer listeners over bufconn and returns a
// client of its RLQS service and the peer listener's target and dialer.
func serve(t testing.TB, svc *Service) (rlqspb.RateLimitQuotaServiceClient, string, grpc.DialOption) {
	t.Helper()
	cl := server.NewClientListener(server.Config{})
	svc.Register(cl)
	pl := server.NewPeerListener(server.Config{})
	svc.RegisterPeer(pl)
	target, dialer := transporttest.Bufconn(t, cl)
	ptarget, pdialer := transporttest.Bufconn(t, pl)
	return rlqspb.NewRateLimitQuotaServiceClient(transporttest.DialConn(t, target, dialer)), ptarget, pdialer
}

func usage(bucket map[string]string, elapsed time.Duration, allowed, denied uint64) *rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage {
	return &rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage{
		BucketId: &rlqspb.BucketId{Bucket: bucket}, TimeElapsed: durationpb.New(elapsed),
		NumRequestsAllowed: allowed, NumRequestsDenied: denied,
	}
}

// exchange sends one report and returns the answer.
func exchange(t *testing.T, st rlqspb.RateLimitQuotaService_StreamRateLimitQuotasClient, domain string, us ...*rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage) *rlqspb.RateLimitQuotaResponse {
	t.Helper()
	if err := st.Send(&rlqspb.RateLimitQuotaUsageReports{Domain: domain, BucketQuotaUsages: us}); err != nil {
		t.Fatalf("Send = %v", err)
	}
	resp, err := st.Recv()
	if err != nil {
		t.Fatalf("Recv = %v", err)
	}
	return resp
}

func tokens(a *rlqspb.RateLimitQuotaResponse_BucketAction) (uint32, bool) {
	tb := a.GetQuotaAssignmentAction().GetRateLimitStrategy().GetTokenBucket()
	return tb.GetTokensPerFill().GetValue(), tb != nil
}

func TestStreamAssignsAndDefaults(t *testing.T) {
	var clock fakeClock
	svc := New(Config{Rules: testStore(t), Node: "a", Interval: time.Second, Now: clock.now})
	client, _, _ := serve(t, svc)
	st, err := client.StreamRateLimitQuotas(transporttest.Ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	resp := exchange(t, st, "edge", usage(map[string]string{"tenant": "acme"}, 0, 1, 0), usage(map[string]string{"path": "/"}, 0, 1, 0))
	if len(resp.GetBucketAction()) != 1 || resp.GetBucketAction()[0].GetBucketId().GetBucket()["path"] != "/" {
		t.Fatalf("answer = %v, want only the unmatched bucket's action (the tenant bucket is new: it learns for an interval)", resp)
	}
	if r := resp.GetBucketAction()[0].GetQuotaAssignmentAction().GetRateLimitStrategy().GetBlanketRule(); r != typev3.RateLimitStrategy_ALLOW_ALL ||
		resp.GetBucketAction()[0].GetQuotaAssignmentAction() == nil {
		t.Errorf("unmatched bucket: %v, want ALLOW_ALL (the domain's default)", resp.GetBucketAction()[0])
	}
	clock.advance(startLearning) // learning has ended
	resp = exchange(t, st, "edge", usage(map[string]string{"tenant": "acme"}, 0, 1, 0))
	if n, ok := tokens(resp.GetBucketAction()[0]); !ok || n != 50 {
		t.Errorf("tenant bucket, first report: %v, want a token bucket of 50 per fill (half of what is free: no demand known)", resp.GetBucketAction()[0])
	}
	if ttl := resp.GetBucketAction()[0].GetQuotaAssignmentAction().GetAssignmentTimeToLive().AsDuration(); ttl != time.Second {
		t.Errorf("first report's TTL = %v, want 1 s (one interval: no demand known yet)", ttl)
	}
	// Later reports may carry no domain; an instance that wants less
	// than the limit gets its demand.
	resp = exchange(t, st, "", usage(map[string]string{"tenant": "acme"}, time.Second, 30, 0))
	if n, _ := tokens(resp.GetBucketAction()[0]); n != 30 {
		t.Errorf("second report, 30/s wanted: %v, want 30 per fill", resp)
	}
	if ttl := resp.GetBucketAction()[0].GetQuotaAssignmentAction().GetAssignmentTimeToLive().AsDuration(); ttl != 2*time.Second {
		t.Errorf("TTL = %v, want 2 s (two intervals)", ttl)
	}
	st.CloseSend()
	if _, err := st.Recv(); err == nil {
		t.Errorf("Recv after CloseSend = nil, want the stream's end")
	}
}

func TestStreamRefusesBadInput(t *testing.T) {
	svc := New(Config{Rules: testStore(t), Node: "a", MaxEntries: 2, MaxEntryBytes: 8, MaxBuckets: 2})
	client, _, _ := serve(t, svc)
	long := strings.Repeat("x", 9)
	for _, tc := range []struct {
		name   string
		report *rlqspb.RateLimitQuotaUsageReports
		code   codes.Code
		want   string
	}{
		{"no domain", &rlqspb.RateLimitQuotaUsageReports{BucketQuotaUsages: []*rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage{usage(map[string]string{"tenant": "a"}, 0, 1, 0)}}, codes.InvalidArgument, "no domain"},
		{"empty bucket id", &rlqspb.RateLimitQuotaUsageReports{Domain: "edge", BucketQuotaUsages: []*rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage{usage(nil, 0, 1, 0)}}, codes.InvalidArgument, "bucket_id is empty"},
		{"empty key", &rlqspb.RateLimitQuotaUsageReports{Domain: "edge", BucketQuotaUsages: []*rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage{usage(map[string]string{"": "a"}, 0, 1, 0)}}, codes.InvalidArgument, "empty key"},
		{"too many entries", &rlqspb.RateLimitQuotaUsageReports{Domain: "edge", BucketQuotaUsages: []*rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage{usage(map[string]string{"a": "1", "b": "2", "c": "3"}, 0, 1, 0)}}, codes.InvalidArgument, "3 entries, max 2"},
		{"long value", &rlqspb.RateLimitQuotaUsageReports{Domain: "edge", BucketQuotaUsages: []*rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage{usage(map[string]string{"tenant": long}, 0, 1, 0)}}, codes.InvalidArgument, "over 8 bytes"},
		{"too many buckets", &rlqspb.RateLimitQuotaUsageReports{Domain: "edge", BucketQuotaUsages: []*rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage{
			usage(map[string]string{"t": "1"}, 0, 1, 0), usage(map[string]string{"t": "2"}, 0, 1, 0), usage(map[string]string{"t": "3"}, 0, 1, 0)}}, codes.ResourceExhausted, "3 buckets in one report, max 2"},
	} {
		st, err := client.StreamRateLimitQuotas(transporttest.Ctx(t))
		if err != nil {
			t.Fatal(err)
		}
		if err := st.Send(tc.report); err != nil {
			t.Fatal(err)
		}
		_, err = st.Recv()
		if status.Code(err) != tc.code || !strings.Contains(status.Convert(err).Message(), tc.want) {
			t.Errorf("%s: Recv = %v, want %v with %q", tc.name, err, tc.code, tc.want)
		}
	}
}

func TestStreamsBounded(t *testing.T) {
	svc := New(Config{Rules: testStore(t), Node: "a", MaxStreams: 1})
	client, _, _ := serve(t, svc)
	first, err := client.StreamRateLimitQuotas(transporttest.Ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	exchange(t, first, "edge", usage(map[string]string{"path": "/"}, 0, 1, 0)) // the first stream is open
	second, err := client.StreamRateLimitQuotas(transporttest.Ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	second.Send(&rlqspb.RateLimitQuotaUsageReports{Domain: "edge"})
	if _, err := second.Recv(); status.Code(err) != codes.ResourceExhausted {
		t.Errorf("second stream over MaxStreams 1: %v, want ResourceExhausted", err)
	}
}

func TestReportsGoToTheOwner(t *testing.T) {
	var clock fakeClock
	owner := New(Config{Rules: testStore(t), Node: "owner", Interval: time.Second, Now: clock.now})
	_, ptarget, pdialer := serve(t, owner)
	front := New(Config{Rules: testStore(t), Node: "front", Interval: time.Second,
		Router: routeTo{addr: ptarget}, DialOptions: []grpc.DialOption{pdialer}})
	client, _, _ := serve(t, front)
	t.Cleanup(front.owners.closeAll)
	ctx := transporttest.Ctx(t)
	a, err := client.StreamRateLimitQuotas(ctx)
	if err != nil {
		t.Fatal(err)
	}
	b, err := client.StreamRateLimitQuotas(ctx)
	if err != nil {
		t.Fatal(err)
	}
	tenant := map[string]string{"tenant": "acme"}
	other := map[string]string{"path": "/"} // answered at once: the tenant's new bucket learns first
	exchange(t, a, "edge", usage(tenant, 0, 1, 0), usage(other, 0, 1, 0))
	exchange(t, b, "edge", usage(tenant, 0, 1, 0), usage(other, 0, 1, 0))
	clock.advance(startLearning)
	// Both instances want 500/s of the tenant's 100/s: once a's first
	// lease of all 100 has ended, each gets half.
	for round := 0; ; round++ {
		ra := exchange(t, a, "edge", usage(tenant, time.Second, 100, 400))
		rb := exchange(t, b, "edge", usage(tenant, time.Second, 100, 400))
		na, _ := tokens(ra.GetBucketAction()[0])
		nb, _ := tokens(rb.GetBucketAction()[0])
		if na+nb > 100 {
			t.Fatalf("assignments %d + %d exceed the limit 100", na, nb)
		}
		if na == 50 && nb == 50 {
			break
		}
		if round == 5 {
			t.Fatalf("after %d reports: assignments %d and %d, want 50 each", round, na, nb)
		}
		clock.advance(time.Second)
	}
	if st := owner.table.Stats(clock.now())[group("edge", "per_tenant")]; st.Instances != 2 {
		t.Errorf("the owner's table: %+v, want the two instances", st)
	}
	if st := front.table.Stats(time.Now()); len(st) != 0 {
		t.Errorf("the front node's table holds %v, want nothing (it owns no bucket)", st)
	}
}

// startLearning is how long a node learns a bucket new to it after its
// start (the tests' nodes start at the clock's start): an assignment's
// life, two 1 s intervals and Slack.
const startLearning = 2*time.Second + quota.Slack

// fakeClock is a clock the test moves.
type fakeClock struct{ at atomic.Int64 }

func (c *fakeClock) now() time.Time { return time.Unix(1_700_000_000, c.at.Load()) }

func (c *fakeClock) advance(d time.Duration) { c.at.Add(int64(d)) }

// switchRoute sends every matched bucket to the owner its addr holds.
type switchRoute struct{ addr atomic.Pointer[string] }

func (r *switchRoute) Owner(string) (string, bool) { return *r.addr.Load(), false }

func (r *switchRoute) Backup(string) (string, bool) { return "", false }

func (r *switchRoute) RingVersion() uint64 { return 0 }

// TestUnreachableOwnerLeavesExpiryToEnvoy: while the owner cannot be
// reached, nothing is sent for its bucket, before and after the
// assignment's TTL ends (Envoy's expired_assignment_behavior decides),
// never the domain's default.
func TestUnreachableOwnerLeavesExpiryToEnvoy(t *testing.T) {
	var clock fakeClock
	owner := New(Config{Rules: testStore(t), Node: "owner", Interval: time.Second, Now: clock.now})
	ownerAddr := peerOwner(t, owner)
	dead, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	deadAddr := dead.Addr().String()
	dead.Close() // nothing listens there any more
	var route switchRoute
	route.addr.Store(&ownerAddr)
	front := New(Config{Rules: testStore(t), Node: "front", Interval: time.Second, Now: clock.now, Router: &route})
	client, _, _ := serve(t, front)
	t.Cleanup(front.owners.closeAll)
	st, err := client.StreamRateLimitQuotas(transporttest.Ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	tenant, other := map[string]string{"tenant": "acme"}, map[string]string{"path": "/"}
	exchange(t, st, "edge", usage(tenant, 0, 1, 0), usage(other, 0, 1, 0))
	clock.advance(startLearning) // the new bucket's learning has ended
	resp := exchange(t, st, "edge", usage(tenant, time.Second, 40, 0), usage(other, time.Second, 1, 0))
	if n, _ := tokens(resp.GetBucketAction()[0]); n != 40 {
		t.Fatalf("owner reachable: %v, want 40 per fill", resp)
	}
	route.addr.Store(&deadAddr)
	clock.advance(time.Second) // the assignment of 2 s still runs
	resp = exchange(t, st, "edge", usage(tenant, time.Second, 40, 0), usage(other, time.Second, 1, 0))
	if len(resp.GetBucketAction()) != 1 || resp.GetBucketAction()[0].GetBucketId().GetBucket()["path"] != "/" {
		t.Errorf("owner unreachable, assignment running: %v, want only the other bucket's action (Envoy keeps its assignment)", resp)
	}
	clock.advance(2 * time.Second) // the assignment has ended
	resp = exchange(t, st, "edge", usage(tenant, time.Second, 40, 0), usage(other, time.Second, 1, 0))
	if len(resp.GetBucketAction()) != 1 || resp.GetBucketAction()[0].GetBucketId().GetBucket()["path"] != "/" {
		t.Errorf("owner unreachable, assignment ended: %v, want only the other bucket's action (Envoy's expired_assignment_behavior applies, not the domain's default ALLOW_ALL)", resp)
	}
	// A new stream (its instance's node crashed) holds nothing the node
	// knows of: nothing either, not the default.
	st2, err := client.StreamRateLimitQuotas(transporttest.Ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	resp = exchange(t, st2, "edge", usage(tenant, time.Second, 40, 0), usage(other, time.Second, 1, 0))
	if len(resp.GetBucketAction()) != 1 || resp.GetBucketAction()[0].GetBucketId().GetBucket()["path"] != "/" {
		t.Errorf("owner unreachable, new stream: %v, want only the other bucket's action", resp)
	}
}

func TestReportsPerSecondBounded(t *testing.T) {
	var clock fakeClock
	svc := New(Config{Rules: testStore(t), Node: "a", MaxReportsPerSecond: 1, Now: clock.now})
	client, _, _ := serve(t, svc)
	st, err := client.StreamRateLimitQuotas(transporttest.Ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	tenant := map[string]string{"tenant": "a"}
	other := map[string]string{"path": "/"}                                // answered at once: the tenant's new bucket learns first
	exchange(t, st, "edge", usage(tenant, 0, 1, 0), usage(other, 0, 1, 0)) // a burst of two passes
	exchange(t, st, "edge", usage(tenant, 0, 1, 0), usage(other, 0, 1, 0))
	st.Send(&rlqspb.RateLimitQuotaUsageReports{Domain: "edge", BucketQuotaUsages: []*rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage{usage(tenant, 0, 1, 0)}})
	if _, err := st.Recv(); status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "reports per second") {
		t.Errorf("third report at the same instant, 1 per second allowed: %v, want ResourceExhausted", err)
	}
}

// backupRoute owns every bucket here and replicates to backup.
type backupRoute struct{ backup string }

func (r backupRoute) Owner(string) (string, bool) { return "", true }

func (r backupRoute) Backup(string) (string, bool) { return r.backup, r.backup != "" }

func (r backupRoute) RingVersion() uint64 { return 0 }

// versionRoute owns every bucket here, on a ring whose version the test
// changes.
type versionRoute struct{ version atomic.Uint64 }

func (r *versionRoute) Owner(string) (string, bool)  { return "", true }
func (r *versionRoute) Backup(string) (string, bool) { return "", false }
func (r *versionRoute) RingVersion() uint64          { return r.version.Load() }

// A bucket new here learns (no assignment for an interval) only while an
// ownership change, or the start, is recent enough that another owner's
// assignment may still be in use; on a settled ring a new bucket is new
// everywhere and is assigned at its first report.
func TestSettledRingSkipsLearning(t *testing.T) {
	var clock fakeClock
	route := &versionRoute{}
	svc := New(Config{Rules: testStore(t), Node: "n", Interval: time.Second, Router: route, Now: clock.now})
	ttl := svc.table.TTL() + quota.Slack + settleMargin
	if svc.settled(clock.now()) {
		t.Fatal("settled at the start: assignments of before a restart may be in use")
	}
	clock.advance(ttl + time.Millisecond)
	if !svc.settled(clock.now()) {
		t.Fatalf("not settled %v after the start with no ring change", ttl)
	}
	route.version.Store(7)
	if svc.settled(clock.now()) {
		t.Fatal("settled just after a ring change")
	}
	clock.advance(ttl / 2)
	if svc.settled(clock.now()) {
		t.Fatal("settled half an assignment's life after a ring change")
	}
	clock.advance(ttl/2 + time.Millisecond)
	if !svc.settled(clock.now()) {
		t.Fatal("not settled an assignment's life after a ring change")
	}
}

// TestNewOwnerCountsReplicatedAssignments: an owner replicates an
// instance's assignment to the bucket's backup before answering, so the
// backup, owner after a crash, counts it until it ends.
func TestNewOwnerCountsReplicatedAssignments(t *testing.T) {
	var clock fakeClock
	next := New(Config{Rules: testStore(t), Node: "next", Interval: time.Second, Now: clock.now, Router: backupRoute{}})
	nextClient, ptarget, pdialer := serve(t, next)
	reg := prometheus.NewRegistry()
	old := New(Config{Rules: testStore(t), Node: "old", Interval: time.Second, Now: clock.now, Registerer: reg,
		Router: backupRoute{backup: ptarget}, DialOptions: []grpc.DialOption{pdialer}})
	oldClient, _, _ := serve(t, old)
	t.Cleanup(old.owners.closeAll)
	ctx := transporttest.Ctx(t)
	tenant := map[string]string{"tenant": "acme"}
	st, err := oldClient.StreamRateLimitQuotas(ctx)
	if err != nil {
		t.Fatal(err)
	}
	exchange(t, st, "edge", usage(tenant, 0, 1, 0), usage(map[string]string{"path": "/"}, 0, 1, 0))
	clock.advance(startLearning) // the new bucket's learning has ended
	resp := exchange(t, st, "edge", usage(tenant, time.Second, 500, 0))
	if n, _ := tokens(resp.GetBucketAction()[0]); n != 100 {
		t.Fatalf("the only instance on the old owner: %v, want 100 per fill", resp)
	}
	// Replicated before the answer, with no periodic round yet: the
	// backup knows the assignment that may be in use.
	if got, _ := transporttest.Sample(t, reg, "shardlimiter_rlqs_replicated_buckets_total"); got != 1 {
		t.Fatalf("replicated buckets = %v, want 1 (the instance's state, before its answer)", got)
	}
	// The old owner is gone; an instance reports to the new one while the
	// old assignment runs: nothing is free.
	st2, err := nextClient.StreamRateLimitQuotas(ctx)
	if err != nil {
		t.Fatal(err)
	}
	resp = exchange(t, st2, "edge", usage(tenant, time.Second, 500, 0), usage(map[string]string{"path": "/"}, 0, 1, 0))
	if len(resp.GetBucketAction()) != 1 || resp.GetBucketAction()[0].GetBucketId().GetBucket()["tenant"] != "" {
		t.Errorf("a new instance on the new owner while the old assignment runs: %v, want nothing for the tenant (learning)", resp)
	}
	clock.advance(3 * time.Second) // the old assignment has ended
	resp = exchange(t, st2, "edge", usage(tenant, time.Second, 500, 0))
	if n, _ := tokens(resp.GetBucketAction()[0]); n == 0 {
		t.Errorf("after the old assignment's TTL: %v, want a share", resp)
	}
}

// peerOwner runs svc's peer listener on loopback TCP and returns its address.
func peerOwner(t *testing.T, svc *Service) string {
	t.Helper()
	pl := server.NewPeerListener(server.Config{})
	svc.RegisterPeer(pl)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go pl.Serve(lis)
	t.Cleanup(pl.Stop)
	return lis.Addr().String()
}

// TestJoinCountsHeldAssignments moves a bucket to a fresh owner (a join,
// no replica) while an instance holds the old owner's whole limit: the
// stream's node tells the new owner what it holds, so a second instance
// gets nothing until that assignment has ended, then a fair share.
func TestJoinCountsHeldAssignments(t *testing.T) {
	var clock fakeClock
	oldAddr := peerOwner(t, New(Config{Rules: testStore(t), Node: "old", Interval: time.Second, Now: clock.now}))
	fresh := New(Config{Rules: testStore(t), Node: "fresh", Interval: time.Second, Now: clock.now})
	freshAddr := peerOwner(t, fresh)
	var route switchRoute
	route.addr.Store(&oldAddr)
	front := New(Config{Rules: testStore(t), Node: "front", Interval: time.Second, Now: clock.now, Router: &route})
	client, _, _ := serve(t, front)
	t.Cleanup(front.owners.closeAll)
	ctx := transporttest.Ctx(t)
	a, err := client.StreamRateLimitQuotas(ctx)
	if err != nil {
		t.Fatal(err)
	}
	tenant, other := map[string]string{"tenant": "acme"}, map[string]string{"path": "/"}
	exchange(t, a, "edge", usage(tenant, 0, 1, 0), usage(other, 0, 1, 0))
	clock.advance(startLearning)
	if n, _ := tokens(exchange(t, a, "edge", usage(tenant, time.Second, 500, 0)).GetBucketAction()[0]); n != 100 {
		t.Fatalf("a alone on the old owner: %d per fill, want 100", n)
	}
	route.addr.Store(&freshAddr) // the join: a holds 100 for 2 s more
	b, err := client.StreamRateLimitQuotas(ctx)
	if err != nil {
		t.Fatal(err)
	}
	clock.advance(500 * time.Millisecond)
	if resp := exchange(t, b, "edge", usage(tenant, time.Second, 500, 0), usage(other, 0, 1, 0)); len(resp.GetBucketAction()) != 1 {
		t.Fatalf("b first on the fresh owner: %v, want nothing for the tenant (learning)", resp)
	}
	if n, _ := tokens(exchange(t, a, "edge", usage(tenant, time.Second, 500, 0)).GetBucketAction()[0]); n != 100 {
		t.Fatalf("a on the fresh owner while learning: %d per fill, want the 100 it holds", n)
	}
	clock.advance(time.Second + quota.Slack) // learning has ended; a's 100 runs for 1 s more
	if n, _ := tokens(exchange(t, b, "edge", usage(tenant, time.Second, 500, 0)).GetBucketAction()[0]); n != 0 {
		t.Fatalf("b after learning, a's 100 still running: %d per fill, want 0", n)
	}
	clock.advance(1500 * time.Millisecond)
	na, _ := tokens(exchange(t, a, "edge", usage(tenant, time.Second, 500, 0)).GetBucketAction()[0])
	nb, _ := tokens(exchange(t, b, "edge", usage(tenant, time.Second, 500, 0)).GetBucketAction()[0])
	if na != 50 || nb != 50 {
		t.Errorf("after a's held assignment ended: %d and %d per fill, want 50 each", na, nb)
	}
}

// TestUnreplicatedAssignmentNotAnswered: an assignment whose backup cannot
// be told is not answered (the instance keeps what it holds, which the
// backup knows), and counted as a replication error.
func TestUnreplicatedAssignmentNotAnswered(t *testing.T) {
	var clock fakeClock
	dead, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	deadAddr := dead.Addr().String()
	dead.Close()
	reg := prometheus.NewRegistry()
	owner := New(Config{Rules: testStore(t), Node: "owner", Interval: time.Second, Now: clock.now, Registerer: reg,
		Router: backupRoute{backup: deadAddr}, PeerTimeout: 200 * time.Millisecond})
	client, _, _ := serve(t, owner)
	t.Cleanup(owner.owners.closeAll)
	st, err := client.StreamRateLimitQuotas(transporttest.Ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	tenant, other := map[string]string{"tenant": "acme"}, map[string]string{"path": "/"}
	exchange(t, st, "edge", usage(tenant, 0, 1, 0), usage(other, 0, 1, 0))
	clock.advance(startLearning)
	resp := exchange(t, st, "edge", usage(tenant, time.Second, 50, 0), usage(other, time.Second, 1, 0))
	if len(resp.GetBucketAction()) != 1 || resp.GetBucketAction()[0].GetBucketId().GetBucket()["path"] != "/" {
		t.Errorf("backup unreachable: %v, want only the other bucket's action", resp)
	}
	if got, _ := transporttest.Sample(t, reg, "shardlimiter_rlqs_replication_errors_total"); got != 1 {
		t.Errorf("replication errors = %v, want 1", got)
	}
}
