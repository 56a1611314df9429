package wire

import (
	"bytes"
	"math"
	"math/rand/v2"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/shardlimiter/shardlimiter/transport/pb"
)

// The reference for every test of this package is protobuf-go: the
// encoders must write what proto.Marshal writes with Deterministic set
// (sorted map keys), and the decoders must read what proto.Unmarshal reads.
var deterministic = proto.MarshalOptions{Deterministic: true}

// randomStrings covers empty, the metadata keys, multi-byte UTF-8 and a
// length that needs a two-byte length prefix.
var randomStrings = []string{"", "owner", "reason", "node-a", "node-b", "10.0.0.7:8081", "ünïcødé ☃",
	"invalid_argument", string(bytes.Repeat([]byte("x"), 200))}

var randomInts = []int64{0, 1, -1, 127, 128, -128, 1_700_000_000_124, math.MaxInt64, math.MinInt64}

func randString(r *rand.Rand) string { return randomStrings[r.IntN(len(randomStrings))] }

func randInt(r *rand.Rand) int64 {
	if r.IntN(4) == 0 {
		return int64(r.Uint64())
	}
	return randomInts[r.IntN(len(randomInts))]
}

// checkSameAsProto asserts that got is the deterministic proto encoding of
// m and decodes back to m.
func checkSameAsProto(t testing.TB, m proto.Message, got []byte) {
	t.Helper()
	want, err := deterministic.Marshal(m)
	if err != nil {
		t.Fatalf("proto.Marshal(%v) = %v", m, err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("encoding of %v =\n%x\nwant\n%x", m, got, want)
	}
	back := m.ProtoReflect().New().Interface()
	if err := proto.Unmarshal(got, back); err != nil || !proto.Equal(back, m) {
		t.Fatalf("proto.Unmarshal(encoding of %v) = %v, %v", m, back, err)
	}
}

// pbRequest and requestOfPB copy the fields of one item between the two
// representations.
func pbRequest(r *Request) *pb.RateLimitRequest {
	return &pb.RateLimitRequest{Name: r.Name, UniqueKey: r.Key, Hits: r.Hits, Limit: r.Limit,
		DurationMs: r.DurationMs, Algorithm: pb.Algorithm(r.Algorithm), Burst: r.Burst,
		MinIntervalMs: r.MinIntervalMs, WarmupMs: r.WarmupMs, Behavior: pb.Behavior(r.Behavior), Chained: r.Chained, Calendar: pb.Calendar(r.Calendar)}
}

func requestOfPB(m *pb.RateLimitRequest) Request {
	return Request{Name: m.GetName(), Key: m.GetUniqueKey(), Hits: m.GetHits(), Limit: m.GetLimit(),
		DurationMs: m.GetDurationMs(), Algorithm: int32(m.GetAlgorithm()), Burst: m.GetBurst(),
		MinIntervalMs: m.GetMinIntervalMs(), WarmupMs: m.GetWarmupMs(), Behavior: int32(m.GetBehavior()), Chained: m.GetChained(), Calendar: int32(m.GetCalendar()), CreatedAtMs: m.GetCreatedAtMs()}
}

// pbResponse and responseOfPB do the same for answers: Owner and Reason
// are the metadata map's entries.
func pbResponse(r *Response) *pb.RateLimitResponse {
	m := &pb.RateLimitResponse{Status: pb.Status(r.Status), Limit: r.Limit, Remaining: r.Remaining,
		ResetTimeMs: r.ResetTimeMs, RetryAfterMs: r.RetryAfterMs, DelayMs: r.DelayMs, Error: r.Error}
	if r.Owner != "" {
		m.Metadata = map[string]string{MetaOwner: r.Owner}
	}
	if r.Reason != 0 {
		if m.Metadata == nil {
			m.Metadata = map[string]string{}
		}
		m.Metadata[MetaReason] = r.Reason.String()
	}
	return m
}

func responseOfPB(m *pb.RateLimitResponse) Response {
	r := Response{Status: int32(m.GetStatus()), Limit: m.GetLimit(), Remaining: m.GetRemaining(),
		ResetTimeMs: m.GetResetTimeMs(), RetryAfterMs: m.GetRetryAfterMs(), DelayMs: m.GetDelayMs(),
		Error: m.GetError(), Owner: m.GetMetadata()[MetaOwner]}
	if reason, ok := m.GetMetadata()[MetaReason]; ok {
		r.Reason = parseReason([]byte(reason))
	}
	return r
}
