package transport

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/shardlimiter/shardlimiter/limit"
	"github.com/shardlimiter/shardlimiter/transport/pb"
)

// converted is what a request turns into on the server, comparable.
type converted struct {
	n      int
	checks []limit.Check
	failed []string // "index alg limit error"
}

func convertedOf(n int, sc *scratch) converted {
	c := converted{n: n, checks: append([]limit.Check{}, sc.checks...)}
	for _, f := range sc.failed {
		c.failed = append(c.failed, fmt.Sprint(f.index, f.alg, f.limit, f.err))
	}
	return c
}

// protoConverted is the reference: proto.Unmarshal, then the conversion
// the HTTP path uses.
func protoConverted(data []byte) (converted, error) {
	var m pb.GetRateLimitsRequest
	if err := proto.Unmarshal(data, &m); err != nil {
		return converted{}, err
	}
	sc := new(scratch)
	for i, r := range m.GetRequests() {
		sc.add(i, r)
	}
	return convertedOf(len(m.GetRequests()), sc), nil
}

func checkBatchLikeProto(t testing.TB, data []byte) {
	t.Helper()
	want, wantErr := protoConverted(data)
	in := checkBatch{max: len(data) + 1}
	in.decode(data)
	defer in.release()
	if (in.err != nil) != (wantErr != nil) {
		t.Fatalf("decode(%x) error = %v, proto's = %v", data, in.err, wantErr)
	}
	if in.err != nil {
		return
	}
	if got := convertedOf(in.n, in.sc); !reflect.DeepEqual(got, want) {
		t.Fatalf("decode(%x) =\n%+v\nwant\n%+v", data, got, want)
	}
}

// randRequest draws a wire item, with values that fail conversion.
func randRequest(r *rand.Rand) *pb.RateLimitRequest {
	return &pb.RateLimitRequest{Name: randString(r), UniqueKey: randString(r), Hits: randInt(r), Limit: randInt(r),
		DurationMs: randInt(r), Algorithm: pb.Algorithm(r.IntN(7) - 1), Burst: randInt(r),
		MinIntervalMs: randInt(r), WarmupMs: randInt(r), Behavior: pb.Behavior(r.IntN(6) - 1)}
}

func TestCheckBatchMatchesProto(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(11, 12))
	for range 2000 {
		m := &pb.ForwardRateLimitsRequest{}
		for range r.IntN(10) {
			m.Requests = append(m.Requests, randRequest(r))
		}
		data, _ := proto.Marshal(m)
		checkBatchLikeProto(t, data)
	}
}

// A request over the limit is refused before its items are converted.
func TestCheckBatchBound(t *testing.T) {
	t.Parallel()
	data, _ := proto.Marshal(&pb.GetRateLimitsRequest{Requests: []*pb.RateLimitRequest{{}, {}, {}}})
	in := checkBatch{max: 2}
	in.decode(data)
	if in.n != 3 || in.sc != nil || Code(in.err) != codes.InvalidArgument {
		t.Fatalf("decode(3 items, max 2) = n %d, scratch %v, err %v; want 3, nil, InvalidArgument", in.n, in.sc, in.err)
	}
}

func FuzzCheckBatch(f *testing.F) {
	r := rand.New(rand.NewPCG(13, 14))
	for range 8 {
		b, _ := proto.Marshal(&pb.GetRateLimitsRequest{Requests: []*pb.RateLimitRequest{randRequest(r), randRequest(r)}})
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) { checkBatchLikeProto(t, data) })
}

// rawCodec sends bytes as they are, to put malformed requests on the wire.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error)      { return *v.(*[]byte), nil }
func (rawCodec) Unmarshal(data []byte, v any) error { *v.(*[]byte) = data; return nil }
func (rawCodec) Name() string                       { return "proto" }

// A request that is not valid proto fails the call with InvalidArgument,
// on both services, and never reaches the Checker.
func TestGRPCMalformedRequest(t *testing.T) {
	t.Parallel()
	fake := &fakeChecker{}
	_, target, dialer := startGRPC(t, GRPCConfig{Checker: fake, Local: fake})
	conn := dialConn(t, target, dialer)
	bad := [][]byte{
		{0x0a, 0xff, 0xff, 0xff, 0xff, 0x0f}, // an item longer than the message
		{0x0a, 0x02, 0x0a, 0x01},             // truncated name
		{0x0a, 0x03, 0x12, 0x01, 0xff},       // key not UTF-8
		{0x0f},                               // invalid wire type
	}
	for _, method := range []string{pb.RateLimiter_GetRateLimits_FullMethodName, pb.Peers_ForwardRateLimits_FullMethodName} {
		for _, req := range bad {
			var reply []byte
			err := conn.Invoke(ctxTimeout(t), method, &req, &reply, grpc.ForceCodec(rawCodec{}))
			if status.Code(err) != codes.InvalidArgument {
				t.Errorf("%s(%x) = %v, want InvalidArgument", method, req, err)
			}
		}
	}
	if n := len(fake.got()); n != 0 {
		t.Errorf("Checker got %d calls, want 0", n)
	}
}
