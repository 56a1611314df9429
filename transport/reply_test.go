package transport

import (
	"math/rand/v2"
	"reflect"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/shardlimiter/shardlimiter/limit"
	"github.com/shardlimiter/shardlimiter/transport/pb"
)

// protoResults is the reference for resultsReply.decode: proto.Unmarshal,
// then resultFromProto per item.
func protoResults(data []byte, forward bool) ([]limit.Result, error) {
	var items []*pb.RateLimitResponse
	owner := ""
	if forward {
		var m pb.ForwardRateLimitsResponse
		if err := proto.Unmarshal(data, &m); err != nil {
			return nil, err
		}
		items, owner = m.GetResponses(), m.GetOwner()
	} else {
		var m pb.GetRateLimitsResponse
		if err := proto.Unmarshal(data, &m); err != nil {
			return nil, err
		}
		items = m.GetResponses()
	}
	out := make([]limit.Result, 0, len(items))
	for _, it := range items {
		out = append(out, resultFromProto(it, owner))
	}
	return out, nil
}

// checkDecodeLikeProto asserts that the hand decoder accepts data exactly
// when proto does and then yields the same results.
func checkDecodeLikeProto(t testing.TB, data []byte, forward bool) {
	t.Helper()
	want, wantErr := protoResults(data, forward)
	r := resultsReply{forward: forward, max: len(data)}
	err := r.decode(data)
	if (err != nil) != (wantErr != nil) {
		t.Fatalf("decode(%x, forward=%v) error = %v, proto's = %v", data, forward, err, wantErr)
	}
	if err == nil && !reflect.DeepEqual(r.results, want) && (len(r.results) != 0 || len(want) != 0) {
		t.Fatalf("decode(%x, forward=%v) =\n%+v\nwant\n%+v", data, forward, r.results, want)
	}
}

func TestReplyDecoderMatchesProto(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(5, 6))
	for range 2000 {
		items := randResponses(r)
		get, _ := proto.Marshal(&pb.GetRateLimitsResponse{Responses: items})
		fwd, _ := proto.Marshal(&pb.ForwardRateLimitsResponse{Responses: items, Owner: randString(r)})
		for _, forward := range []bool{false, true} {
			checkDecodeLikeProto(t, get, forward)
			checkDecodeLikeProto(t, fwd, forward)
		}
	}
}

// An answer with more items than asked is refused before they are decoded.
func TestReplyDecoderBoundsItems(t *testing.T) {
	t.Parallel()
	items := []*pb.RateLimitResponse{{}, {}, {}}
	data, _ := proto.Marshal(&pb.GetRateLimitsResponse{Responses: items})
	r := resultsReply{max: 2}
	if err := r.decode(data); err == nil {
		t.Fatalf("decode(3 items, max 2) = nil error, want one")
	}
	r = resultsReply{max: 3}
	if err := r.decode(data); err != nil || len(r.results) != 3 {
		t.Fatalf("decode(3 items, max 3) = %v, %d results", err, len(r.results))
	}
}

// FuzzReplyDecoder: on any bytes, the hand decoder and proto agree.
func FuzzReplyDecoder(f *testing.F) {
	r := rand.New(rand.NewPCG(7, 8))
	for range 8 {
		b, _ := proto.Marshal(&pb.ForwardRateLimitsResponse{Responses: randResponses(r), Owner: randString(r)})
		f.Add(b)
	}
	f.Add([]byte("\x0a\x04\x42\x02\x0a\xff")) // a metadata key that is not UTF-8
	f.Fuzz(func(t *testing.T, data []byte) {
		checkDecodeLikeProto(t, data, false)
		checkDecodeLikeProto(t, data, true)
	})
}
