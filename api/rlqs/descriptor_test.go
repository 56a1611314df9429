package rlqs

import (
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/descriptorpb"

	"github.com/shardlimiter/shardlimiter/transport/transporttest"
)

// TestReflectionDescribesQuota: server reflection on the peer port
// describes shardlimiter.v1.Quota, its two methods and their messages.
func TestReflectionDescribesQuota(t *testing.T) {
	addr := peerOwner(t, New(Config{Rules: testStore(t), Node: "n"}))
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	st, err := reflectionpb.NewServerReflectionClient(conn).ServerReflectionInfo(transporttest.Ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_FileContainingSymbol{FileContainingSymbol: QuotaService}}); err != nil {
		t.Fatal(err)
	}
	resp, err := st.Recv()
	if err != nil {
		t.Fatal(err)
	}
	files := resp.GetFileDescriptorResponse().GetFileDescriptorProto()
	if len(files) == 0 {
		t.Fatalf("reflection on %s: %v, want its file", QuotaService, resp)
	}
	var fd descriptorpb.FileDescriptorProto
	if err := proto.Unmarshal(files[0], &fd); err != nil {
		t.Fatal(err)
	}
	if fd.GetName() != quotaProto || len(fd.GetService()) != 1 || fd.GetService()[0].GetName() != "Quota" {
		t.Fatalf("file %s with services %v, want %s with Quota", fd.GetName(), fd.GetService(), quotaProto)
	}
	want := map[string][2]string{
		"Report":    {".envoy.service.rate_limit_quota.v3.RateLimitQuotaUsageReports", ".envoy.service.rate_limit_quota.v3.RateLimitQuotaResponse"},
		"Replicate": {".google.protobuf.BytesValue", ".google.protobuf.Empty"},
	}
	for _, m := range fd.GetService()[0].GetMethod() {
		if w, ok := want[m.GetName()]; !ok || m.GetInputType() != w[0] || m.GetOutputType() != w[1] {
			t.Errorf("method %s(%s) returns %s, want %v", m.GetName(), m.GetInputType(), m.GetOutputType(), want[m.GetName()])
		}
		delete(want, m.GetName())
	}
	if len(want) != 0 {
		t.Errorf("methods missing: %v", want)
	}
}
