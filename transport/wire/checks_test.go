package wire

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/shardlimiter/shardlimiter/limit"
	"github.com/shardlimiter/shardlimiter/transport/pb"
)

// randCheck draws a check, including values a node would refuse: the
// encoder must carry them as RequestOf says.
func randCheck(r *rand.Rand) limit.Check {
	durs := []time.Duration{0, 1, time.Millisecond, 1500 * time.Microsecond, -time.Second, limit.MaxPeriod, time.Duration(r.Int64())}
	return limit.Check{Name: randString(r), Key: randString(r), Hits: randInt(r), Chained: r.IntN(2) == 0,
		Rule: limit.Rule{
			Algorithm:   limit.Algorithm(r.IntN(256)),
			Limit:       randInt(r),
			Period:      durs[r.IntN(len(durs))],
			Burst:       randInt(r),
			MinInterval: durs[r.IntN(len(durs))],
			Warmup:      durs[r.IntN(len(durs))],
			Behavior:    limit.Behavior([]uint32{0, 1, 3, 0x80000000, 0xffffffff}[r.IntN(5)]),
			Calendar:    limit.Calendar(r.IntN(5)),
		}}
}

// protoRequest is the request message of checks, converted by RequestOf.
func protoRequest(checks []limit.Check) *pb.GetRateLimitsRequest {
	m := &pb.GetRateLimitsRequest{}
	for i := range checks {
		r := RequestOf(&checks[i])
		m.Requests = append(m.Requests, pbRequest(&r))
	}
	return m
}

func TestAppendChecksMatchesProto(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(9, 10))
	for range 2000 {
		checks := make([]limit.Check, r.IntN(10))
		for i := range checks {
			checks[i] = randCheck(r)
		}
		offs := make([]int, len(checks)+1)
		got, err := AppendChecks(nil, checks, offs)
		if err != nil {
			t.Fatalf("AppendChecks(%+v) = %v", checks, err)
		}
		if len(got) != SizeChecks(checks) {
			t.Fatalf("AppendChecks wrote %d bytes, SizeChecks = %d", len(got), SizeChecks(checks))
		}
		checkSameAsProto(t, protoRequest(checks), got)
		checkSameAsProto(t, &pb.ForwardRateLimitsRequest{Requests: protoRequest(checks).Requests}, got)
		for i := range checks { // every run of checks is a request of its own
			one, _ := deterministic.Marshal(protoRequest(checks[i : i+1]))
			if run := got[offs[i]:offs[i+1]]; !bytes.Equal(run, one) {
				t.Fatalf("item %d encoded %x, want %x", i, run, one)
			}
		}
	}
}

func TestAppendChecksInvalidUTF8(t *testing.T) {
	t.Parallel()
	for _, c := range []limit.Check{{Name: "\xff"}, {Key: "a\xc3"}} {
		if _, err := AppendChecks(nil, []limit.Check{c}, nil); err == nil {
			t.Errorf("AppendChecks(%+v) = nil error, want one", c)
		}
		if _, err := proto.Marshal(protoRequest([]limit.Check{c})); err == nil {
			t.Errorf("proto.Marshal(%+v) = nil error; the test case is wrong", c)
		}
	}
}

// A check goes through the wire unchanged when its durations are whole
// milliseconds, its values representable and its enums known.
func TestChecksRoundTrip(t *testing.T) {
	t.Parallel()
	checks := []limit.Check{
		{Name: "api", Key: "account:42", Hits: 1, Rule: limit.Rule{Algorithm: limit.TokenBucket, Limit: 100,
			Period: time.Minute, Burst: 150, Warmup: time.Second, Behavior: limit.Reset}},
		{Name: "api", Key: "account:43", Rule: limit.Rule{Algorithm: limit.SlidingLog, Limit: 5,
			Period: time.Hour, MinInterval: 10 * time.Millisecond, Behavior: limit.CountRejected}},
		{Name: "ünï", Key: "k", Hits: -3, Rule: limit.Rule{Algorithm: limit.FixedWindow, Limit: -1, Period: limit.MaxPeriod}},
	}
	data, err := AppendChecks(nil, checks, nil)
	if err != nil {
		t.Fatalf("AppendChecks = %v", err)
	}
	var got Checks
	if n, err := DecodeChecks(data, len(checks), &got); n != len(checks) || err != nil || len(got.Failed) != 0 {
		t.Fatalf("DecodeChecks(AppendChecks(%+v)) = %d, %v, failed %+v", checks, n, err, got.Failed)
	}
	if !reflect.DeepEqual(got.Checks, checks) {
		t.Fatalf("DecodeChecks(AppendChecks(%+v)) = %+v", checks, got.Checks)
	}
}

// decoded is what a request turns into on the server, comparable.
type decoded struct {
	n      int
	checks []limit.Check
	failed []string // "index alg limit error"
}

func decodedOf(n int, c *Checks) decoded {
	d := decoded{n: n, checks: append([]limit.Check{}, c.Checks...)}
	for _, f := range c.Failed {
		d.failed = append(d.failed, fmt.Sprint(f.Index, f.Algorithm, f.Limit, f.Err))
	}
	return d
}

// protoDecoded is the reference: proto.Unmarshal, then Checks.Add per item
// (the HTTP path's conversion).
func protoDecoded(data []byte) (decoded, error) {
	var m pb.GetRateLimitsRequest
	if err := proto.Unmarshal(data, &m); err != nil {
		return decoded{}, err
	}
	var c Checks
	for _, it := range m.GetRequests() {
		r := requestOfPB(it)
		c.Add(&r)
	}
	return decodedOf(len(m.GetRequests()), &c), nil
}

func checkDecodeChecksLikeProto(t testing.TB, data []byte) {
	t.Helper()
	want, wantErr := protoDecoded(data)
	var c Checks
	n, err := DecodeChecks(data, len(data)+1, &c)
	if (err != nil) != (wantErr != nil) {
		t.Fatalf("DecodeChecks(%x) error = %v, proto's = %v", data, err, wantErr)
	}
	if err != nil {
		return
	}
	if got := decodedOf(n, &c); !reflect.DeepEqual(got, want) {
		t.Fatalf("DecodeChecks(%x) =\n%+v\nwant\n%+v", data, got, want)
	}
}

// randRequest draws a wire item, with values that fail conversion.
func randRequest(r *rand.Rand) *pb.RateLimitRequest {
	return &pb.RateLimitRequest{Name: randString(r), UniqueKey: randString(r), Hits: randInt(r), Limit: randInt(r),
		DurationMs: randInt(r), Algorithm: pb.Algorithm(r.IntN(7) - 1), Burst: randInt(r),
		MinIntervalMs: randInt(r), WarmupMs: randInt(r), Behavior: pb.Behavior(r.IntN(6) - 1), Chained: r.IntN(2) == 0,
		Calendar: pb.Calendar(r.IntN(6) - 1), CreatedAtMs: []int64{0, 0, 1_700_000_000_000, -1}[r.IntN(4)]}
}

func TestDecodeChecksMatchesProto(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(11, 12))
	var c Checks // reused, as the server's pool does
	for range 2000 {
		m := &pb.ForwardRateLimitsRequest{}
		for range r.IntN(10) {
			m.Requests = append(m.Requests, randRequest(r))
		}
		data, _ := proto.Marshal(m)
		checkDecodeChecksLikeProto(t, data)
		if n, err := DecodeChecks(data, 10, &c); err != nil || n != c.Len() || n != len(m.Requests) {
			t.Fatalf("DecodeChecks into a used Checks = %d, %v; Len %d, want %d", n, err, c.Len(), len(m.Requests))
		}
	}
}

// A request over the limit is refused before its items are decoded.
func TestDecodeChecksBound(t *testing.T) {
	t.Parallel()
	data, _ := proto.Marshal(&pb.GetRateLimitsRequest{Requests: []*pb.RateLimitRequest{{}, {}, {}}})
	var c Checks
	if n, err := DecodeChecks(data, 2, &c); n != 3 || !errors.Is(err, ErrTooMany) || cap(c.Checks) != 0 {
		t.Fatalf("DecodeChecks(3 items, max 2) = %d, %v, capacity %d; want 3, ErrTooMany, 0", n, err, cap(c.Checks))
	}
	if n, err := DecodeChecks(data, 3, &c); n != 3 || err != nil || c.Len() != 3 {
		t.Fatalf("DecodeChecks(3 items, max 3) = %d, %v, %d items", n, err, c.Len())
	}
}

func FuzzDecodeChecks(f *testing.F) {
	r := rand.New(rand.NewPCG(13, 14))
	for range 8 {
		b, _ := proto.Marshal(&pb.GetRateLimitsRequest{Requests: []*pb.RateLimitRequest{randRequest(r), randRequest(r)}})
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) { checkDecodeChecksLikeProto(t, data) })
}

// benchChecks are n valid checks of one rule on distinct keys.
func benchChecks(n int) []limit.Check {
	checks := make([]limit.Check, n)
	for i := range checks {
		checks[i] = limit.Check{Name: "api_per_minute", Key: fmt.Sprintf("account:%d", i), Hits: 1,
			Rule: limit.Rule{Algorithm: limit.TokenBucket, Limit: 100, Period: time.Minute}}
	}
	return checks
}

// BenchmarkAppendChecks100 is what a client spends encoding a 100-item request.
func BenchmarkAppendChecks100(b *testing.B) {
	checks := benchChecks(100)
	buf := make([]byte, 0, SizeChecks(checks))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := AppendChecks(buf[:0], checks, nil); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDecodeChecks100 is what a server spends decoding and converting
// a 100-item request (the keys are copied into one string per batch).
func BenchmarkDecodeChecks100(b *testing.B) {
	data, _ := AppendChecks(nil, benchChecks(100), nil)
	var c Checks
	b.ReportAllocs()
	for b.Loop() {
		if _, err := DecodeChecks(data, 100, &c); err != nil {
			b.Fatal(err)
		}
	}
}
