package rlqs

import (
	"context"
	"testing"
	"time"

	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/shardlimiter/shardlimiter/transport/server"
	"github.com/shardlimiter/shardlimiter/transport/transporttest"
)

// BenchmarkOwnerReport is one peer report (Quota/Report) of one bucket
// answered with an assignment, on an owner without a backup (a lone node)
// and with one (bufconn): the second pays the replication of the
// assignment before the answer.
func BenchmarkOwnerReport(b *testing.B) {
	for _, name := range []string{"backup=none", "backup=bufconn"} {
		b.Run(name, func(b *testing.B) {
			var clock fakeClock
			route := backupRoute{}
			var opts []grpc.DialOption
			if name == "backup=bufconn" {
				backup := New(Config{Rules: testStore(b), Node: "backup", Interval: time.Second})
				pl := server.NewPeerListener(server.Config{})
				backup.RegisterPeer(pl)
				target, dialer := transporttest.Bufconn(b, pl)
				route, opts = backupRoute{backup: target}, []grpc.DialOption{dialer}
			}
			owner := New(Config{Rules: testStore(b), Node: "owner", Interval: time.Second, Now: clock.now, Router: route, DialOptions: opts})
			_, ptarget, pdialer := serve(b, owner)
			b.Cleanup(owner.owners.closeAll)
			cc := transporttest.DialConn(b, ptarget, pdialer)
			clock.advance(10 * time.Second) // past the learning after a start; the ring settled
			ctx := metadata.AppendToOutgoingContext(context.Background(), instanceKey, "front/1")
			in := &rlqspb.RateLimitQuotaUsageReports{Domain: "edge", BucketQuotaUsages: []*rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage{
				usage(map[string]string{"tenant": "acme"}, time.Second, 50, 0)}}
			b.ReportAllocs()
			for b.Loop() {
				out := new(rlqspb.RateLimitQuotaResponse)
				if err := cc.Invoke(ctx, ReportMethod, in, out); err != nil {
					b.Fatal(err)
				}
				if out.GetBucketAction()[0].GetQuotaAssignmentAction() == nil {
					b.Fatalf("answer %v, want an assignment", out)
				}
			}
		})
	}
}
