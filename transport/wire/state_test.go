package wire

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/shardlimiter/shardlimiter/limit"
	"github.com/shardlimiter/shardlimiter/transport/pb"
)

// randPush draws a push: keys of every algorithm with empty, short and
// long keys and states, and partitions of every size.
func randPush(r *rand.Rand) (string, int32, []limit.KeyState, []int) {
	keys := make([]limit.KeyState, r.IntN(8))
	for i := range keys {
		keys[i] = limit.KeyState{Algorithm: limit.Algorithm(r.IntN(5)), Key: randString(r)}
		if s := randString(r); s != "" {
			keys[i].State = []byte(s)
		}
	}
	parts := make([]int, r.IntN(6))
	for i := range parts {
		parts[i] = []int{0, 1, 127, 128, 270, 1 << 20}[r.IntN(6)]
	}
	return randString(r), int32(r.IntN(4) - 1), keys, parts
}

func pbPush(from string, transfer int32, keys []limit.KeyState, parts []int) *pb.PushStateRequest {
	m := &pb.PushStateRequest{From: from, Transfer: pb.Transfer(transfer)}
	for _, k := range keys {
		m.Keys = append(m.Keys, &pb.KeyState{Algorithm: pb.Algorithm(k.Algorithm), Key: []byte(k.Key), State: k.State})
	}
	for _, p := range parts {
		m.Partitions = append(m.Partitions, uint32(p))
	}
	return m
}

func TestAppendPushMatchesProto(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(21, 22))
	for range 2000 {
		from, transfer, keys, parts := randPush(r)
		got, err := AppendPush(nil, from, transfer, keys, parts)
		if err != nil {
			t.Fatal(err)
		}
		if n := SizePush(from, transfer, keys, parts); n != len(got) {
			t.Fatalf("SizePush = %d, encoded %d bytes", n, len(got))
		}
		checkSameAsProto(t, pbPush(from, transfer, keys, parts), got)
	}
	if _, err := AppendPush(nil, "\xff", 0, nil, nil); err != errInvalidUTF8 {
		t.Errorf("AppendPush(from not UTF-8) = %v, want %v", err, errInvalidUTF8)
	}
}

// protoPush is the reference decoder: proto.Unmarshal, then the
// conversion of the generated keys the State server made.
func protoPush(data []byte) (Push, error) {
	var m pb.PushStateRequest
	if err := proto.Unmarshal(data, &m); err != nil {
		return Push{}, err
	}
	p := Push{From: m.GetFrom(), Transfer: int32(m.GetTransfer()), Partitions: m.GetPartitions()}
	p.Keys = make([]limit.KeyState, len(m.GetKeys()))
	for i, k := range m.GetKeys() {
		if a := k.GetAlgorithm(); a < pb.Algorithm_TOKEN_BUCKET || a > 0xFF || !limit.Algorithm(a).Moved() {
			return Push{}, fmt.Errorf("key state %d: unknown algorithm %d", i, a)
		}
		p.Keys[i] = limit.KeyState{Algorithm: limit.Algorithm(k.GetAlgorithm()), Key: string(k.GetKey())}
		if len(k.GetState()) > 0 {
			p.Keys[i].State = k.GetState()
		}
	}
	return p, nil
}

func checkDecodePushLikeProto(t testing.TB, data []byte) {
	t.Helper()
	want, wantErr := protoPush(data)
	got, err := DecodePush(data, len(data)+1)
	if (err != nil) != (wantErr != nil) {
		t.Fatalf("DecodePush(%x) error = %v, proto's = %v", data, err, wantErr)
	}
	if err != nil {
		return
	}
	if len(got.Partitions) == 0 && len(want.Partitions) == 0 {
		got.Partitions, want.Partitions = nil, nil
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("DecodePush(%x) =\n%+v\nwant\n%+v", data, got, want)
	}
}

func TestDecodePushMatchesProto(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(23, 24))
	for range 2000 {
		m := pbPush(randPush(r))
		for _, k := range m.Keys {
			if r.IntN(10) == 0 {
				k.Algorithm = pb.Algorithm(r.IntN(9) - 2) // unknown ones fail conversion
			}
		}
		data, _ := proto.Marshal(m)
		// What another encoder may send: unpacked partitions, a field
		// twice, an unknown field, a known field of the wrong type.
		switch r.IntN(5) {
		case 0:
			data = protowire.AppendTag(data, pushPartitions, protowire.VarintType)
			data = protowire.AppendVarint(data, 1<<33+5)
		case 1:
			data = protowire.AppendTag(data, pushFrom, protowire.BytesType)
			data = protowire.AppendString(data, "later")
			data = protowire.AppendTag(data, pushTransfer, protowire.VarintType)
			data = protowire.AppendVarint(data, 2)
		case 2:
			data = protowire.AppendTag(data, 9, protowire.Fixed64Type)
			data = protowire.AppendFixed64(data, 7)
		case 3:
			data = protowire.AppendTag(data, pushFrom, protowire.VarintType)
			data = protowire.AppendVarint(data, 7)
		}
		checkDecodePushLikeProto(t, data)
	}
}

// A push of more keys than allowed is refused before they are decoded.
func TestDecodePushBound(t *testing.T) {
	t.Parallel()
	data, _ := AppendPush(nil, "a", 0, make([]limit.KeyState, 3), nil)
	if _, err := DecodePush(data, 2); err == nil {
		t.Fatal("DecodePush(3 keys, max 2) = nil error")
	}
	if p, err := DecodePush(data, 3); err != nil || len(p.Keys) != 3 {
		t.Fatalf("DecodePush(3 keys, max 3) = %d keys, %v", len(p.Keys), err)
	}
}

// A lease book travels beside the table states (limit.LeaseBook); a number
// between the last algorithm and it is refused.
func TestDecodePushLeaseBook(t *testing.T) {
	t.Parallel()
	keys := []limit.KeyState{{Algorithm: limit.LeaseBook, Key: "k", State: []byte{1, 0}}, {Algorithm: limit.TokenBucket, Key: "k", State: []byte{9}}}
	data, _ := AppendPush(nil, "a", 0, keys, nil)
	p, err := DecodePush(data, 10)
	if err != nil || len(p.Keys) != 2 || p.Keys[0].Algorithm != limit.LeaseBook || p.Keys[0].Key != "k" || string(p.Keys[0].State) != "\x01\x00" {
		t.Fatalf("DecodePush(a lease book and a state) = %+v, %v", p.Keys, err)
	}
	keys[0].Algorithm = limit.MaxAlgorithm + 1
	data, _ = AppendPush(nil, "a", 0, keys, nil)
	if _, err := DecodePush(data, 10); err == nil {
		t.Fatalf("DecodePush(algorithm %d) = nil error", limit.MaxAlgorithm+1)
	}
}

func FuzzDecodePush(f *testing.F) {
	r := rand.New(rand.NewPCG(25, 26))
	for range 8 {
		b, _ := proto.Marshal(pbPush(randPush(r)))
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) { checkDecodePushLikeProto(t, data) })
}

// benchKeys are n replicas as a round sends them: token-bucket keys with
// their 8-byte states.
func benchKeys(n int) []limit.KeyState {
	keys := make([]limit.KeyState, n)
	for i := range keys {
		keys[i] = limit.KeyState{Algorithm: limit.TokenBucket, Key: fmt.Sprintf("api_per_minute\x00account:%d", i),
			State: []byte{1, 2, 3, 4, 5, 6, 7, 8}}
	}
	return keys
}

// BenchmarkPush1000 encodes and decodes a 1000-key push, by hand and as the
// generated messages did (the conversions included).
func BenchmarkPush1000(b *testing.B) {
	keys := benchKeys(1000)
	data, _ := AppendPush(nil, "node-a", 0, keys, nil)
	b.Run("encode/wire", func(b *testing.B) {
		buf := make([]byte, 0, len(data))
		b.ReportAllocs()
		for b.Loop() {
			if _, err := AppendPush(buf[:0], "node-a", 0, keys, nil); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("encode/proto", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := proto.Marshal(pbPush("node-a", 0, keys, nil)); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("decode/wire", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := DecodePush(data, len(keys)); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("decode/proto", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := protoPush(data); err != nil {
				b.Fatal(err)
			}
		}
	})
}
