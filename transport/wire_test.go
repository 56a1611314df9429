package transport

import (
	"bytes"
	"math"
	"math/rand/v2"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/shardlimiter/shardlimiter/transport/pb"
)

// The hand encoder must produce what proto.Marshal produces with
// Deterministic set (sorted map keys): same bytes, hence the same message
// for any standard decoder.
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

// randResponse draws an item; the metadata shapes are the server's (none,
// owner only, owner and reason, reason only) and arbitrary ones.
func randResponse(r *rand.Rand, owners []string) *pb.RateLimitResponse {
	m := &pb.RateLimitResponse{Status: pb.Status(r.IntN(3)), Limit: randInt(r), Remaining: randInt(r),
		ResetTimeMs: randInt(r), RetryAfterMs: randInt(r), DelayMs: randInt(r)}
	if r.IntN(3) == 0 {
		m.Error = randString(r)
	}
	owner := owners[r.IntN(len(owners))]
	switch r.IntN(6) {
	case 0:
	case 1:
		m.Metadata = map[string]string{}
	case 2:
		m.Metadata = map[string]string{metaReason: randString(r)}
	case 3:
		m.Metadata = map[string]string{metaOwner: owner, metaReason: "invalid_argument"}
	case 4:
		m.Metadata = map[string]string{randString(r): randString(r), randString(r): randString(r), metaOwner: owner}
	default:
		m.Metadata = map[string]string{metaOwner: owner}
	}
	return m
}

func randResponses(r *rand.Rand) []*pb.RateLimitResponse {
	owners := []string{randString(r), randString(r)}
	items := make([]*pb.RateLimitResponse, r.IntN(20))
	for i := range items {
		items[i] = randResponse(r, owners)
	}
	return items
}

func encodeGet(t testing.TB, m *pb.GetRateLimitsResponse) []byte {
	t.Helper()
	var e responseEncoder
	b, err := e.appendGet(nil, m)
	if err != nil {
		t.Fatalf("appendGet(%v) = %v", m, err)
	}
	if len(b) != e.sizeGet(m) {
		t.Fatalf("appendGet wrote %d bytes, sizeGet = %d", len(b), e.sizeGet(m))
	}
	return b
}

func encodeForward(t testing.TB, m *pb.ForwardRateLimitsResponse) []byte {
	t.Helper()
	var e responseEncoder
	b, err := e.appendForward(nil, m)
	if err != nil {
		t.Fatalf("appendForward(%v) = %v", m, err)
	}
	if len(b) != e.sizeForward(m) {
		t.Fatalf("appendForward wrote %d bytes, sizeForward = %d", len(b), e.sizeForward(m))
	}
	return b
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
		t.Fatalf("hand encoding of %v =\n%x\nwant\n%x", m, got, want)
	}
	back := m.ProtoReflect().New().Interface()
	if err := proto.Unmarshal(got, back); err != nil || !proto.Equal(back, m) {
		t.Fatalf("proto.Unmarshal(hand encoding of %v) = %v, %v", m, back, err)
	}
}

func TestResponseEncoderMatchesProto(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(1, 2))
	for range 2000 {
		items := randResponses(r)
		checkSameAsProto(t, &pb.GetRateLimitsResponse{Responses: items}, encodeGet(t, &pb.GetRateLimitsResponse{Responses: items}))
		fwd := &pb.ForwardRateLimitsResponse{Responses: items, Owner: randString(r)}
		checkSameAsProto(t, fwd, encodeForward(t, fwd))
	}
}

// The encoder refuses what proto.Marshal refuses: strings that are not UTF-8.
func TestResponseEncoderInvalidUTF8(t *testing.T) {
	t.Parallel()
	bad := "\xff"
	cases := []*pb.ForwardRateLimitsResponse{
		{Owner: bad},
		{Responses: []*pb.RateLimitResponse{{Error: bad}}},
		{Responses: []*pb.RateLimitResponse{{Metadata: map[string]string{metaOwner: bad}}}},
		{Responses: []*pb.RateLimitResponse{{Metadata: map[string]string{bad: "x", "y": "z"}}}},
		{Responses: []*pb.RateLimitResponse{{Metadata: map[string]string{metaReason: bad}}}},
	}
	for _, m := range cases {
		var e responseEncoder
		if _, err := e.appendForward(nil, m); err == nil {
			t.Errorf("appendForward(%q) = nil error, want one", m)
		}
		if _, err := proto.Marshal(m); err == nil {
			t.Errorf("proto.Marshal(%q) = nil error; the test case is wrong", m)
		}
	}
}

// FuzzResponseEncoder decodes arbitrary bytes with proto and re-encodes the
// message by hand: the result must be proto's own encoding of it.
func FuzzResponseEncoder(f *testing.F) {
	r := rand.New(rand.NewPCG(3, 4))
	for range 8 {
		b, _ := deterministic.Marshal(&pb.ForwardRateLimitsResponse{Responses: randResponses(r), Owner: randString(r)})
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var get pb.GetRateLimitsResponse
		if proto.Unmarshal(data, &get) == nil {
			get.ProtoReflect().SetUnknown(nil)
			for _, it := range get.Responses {
				it.ProtoReflect().SetUnknown(nil) // the encoder writes known fields only
			}
			checkSameAsProto(t, &get, encodeGet(t, &get))
		}
		var fwd pb.ForwardRateLimitsResponse
		if proto.Unmarshal(data, &fwd) == nil {
			fwd.ProtoReflect().SetUnknown(nil)
			for _, it := range fwd.Responses {
				it.ProtoReflect().SetUnknown(nil)
			}
			checkSameAsProto(t, &fwd, encodeForward(t, &fwd))
		}
	})
}
