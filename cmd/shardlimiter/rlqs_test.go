package main

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/shardlimiter/shardlimiter/internal/poll"
)

const rlqsService = "envoy.service.rate_limit_quota.v3.RateLimitQuotaService"

// TestRLQSRealBinary drives Envoy's quota service of the binary, with the
// example rules, through go-control-plane's client: the service is listed
// by reflection and serving, another bucket gets the default ALLOW_ALL at
// once, a tenant's new bucket a token bucket of half the rule's 100/s (a
// first report) pushed when its learning interval ends, and a stream without
// a domain or with an empty bucket_id ends with InvalidArgument.
func TestRLQSRealBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a real process")
	}
	t.Parallel()
	p := startRLSNode(t, "127.0.0.73", "../../examples/rlqs/rules.yaml", "--rlqs-report-interval", "1s")
	conn, err := grpc.NewClient(p.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	poll.Until(t, 5*time.Second, func() bool {
		r, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: rlqsService})
		return err == nil && r.Status == healthpb.HealthCheckResponse_SERVING
	}, "health SERVING for "+rlqsService)
	if listed := listServices(t, ctx, conn); !strings.Contains(listed, rlqsService) {
		t.Errorf("reflection lists %s, want %s", listed, rlqsService)
	}
	c := rlqspb.NewRateLimitQuotaServiceClient(conn)
	st, err := c.StreamRateLimitQuotas(ctx)
	if err != nil {
		t.Fatal(err)
	}
	report := func(bucket map[string]string) *rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage {
		return &rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage{BucketId: &rlqspb.BucketId{Bucket: bucket}, TimeElapsed: durationpb.New(0), NumRequestsAllowed: 1}
	}
	if err := st.Send(&rlqspb.RateLimitQuotaUsageReports{Domain: "edge", BucketQuotaUsages: []*rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage{
		report(map[string]string{"tenant": "acme"}), report(map[string]string{"path": "/"})}}); err != nil {
		t.Fatal(err)
	}
	resp, err := st.Recv()
	if err != nil {
		t.Fatal(err)
	}
	acts := resp.GetBucketAction()
	if len(acts) != 1 || acts[0].GetQuotaAssignmentAction().GetRateLimitStrategy() == nil || acts[0].GetQuotaAssignmentAction().GetRateLimitStrategy().GetTokenBucket() != nil {
		t.Errorf("answer %v, want only ALLOW_ALL for the other bucket (tenant acme's new bucket learns for an interval)", resp)
	}
	// When learning ends (1 s and 200 ms later) the node asks the owner
	// again and pushes the tenant's first assignment down the stream.
	if resp, err = st.Recv(); err != nil {
		t.Fatal(err)
	}
	if acts := resp.GetBucketAction(); len(acts) != 1 || acts[0].GetQuotaAssignmentAction().GetRateLimitStrategy().GetTokenBucket().GetTokensPerFill().GetValue() != 50 {
		t.Errorf("pushed %v, want a token bucket of 50 per second for tenant acme (half of its 100/s: a first report)", resp)
	}
	for _, tc := range []struct {
		name string
		msg  *rlqspb.RateLimitQuotaUsageReports
		want string
	}{
		{"no domain", &rlqspb.RateLimitQuotaUsageReports{BucketQuotaUsages: []*rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage{report(map[string]string{"tenant": "a"})}}, "no domain"},
		{"empty bucket_id", &rlqspb.RateLimitQuotaUsageReports{Domain: "edge", BucketQuotaUsages: []*rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage{report(nil)}}, "bucket_id is empty"},
	} {
		st, err := c.StreamRateLimitQuotas(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := st.Send(tc.msg); err != nil {
			t.Fatal(err)
		}
		_, err = st.Recv()
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: Recv = %v, want InvalidArgument with %q", tc.name, err, tc.want)
		}
	}
}

func listServices(t *testing.T, ctx context.Context, conn *grpc.ClientConn) string {
	t.Helper()
	stream, err := reflectionpb.NewServerReflectionClient(conn).ServerReflectionInfo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}}); err != nil {
		t.Fatal(err)
	}
	rr, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprint(rr.GetListServicesResponse().GetService())
}
