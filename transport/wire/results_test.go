package wire

import (
	"math"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/shardlimiter/shardlimiter/limit"
	"github.com/shardlimiter/shardlimiter/transport/pb"
)

// randResult draws a Result as a node may answer it: decided by one of a
// few owners or by none, with durations that round, Never, negative
// values, and failures with and without a reason.
func randResult(r *rand.Rand, owners []string) limit.Result {
	durs := []time.Duration{0, 1, time.Millisecond, 1500 * time.Microsecond, -time.Second, limit.Never,
		time.Duration(r.Int64()), -time.Duration(r.Int64())}
	res := limit.Result{Decision: limit.Decision{Allowed: r.IntN(2) == 0, Remaining: randInt(r), ResetAt: randInt(r),
		RetryAfter: durs[r.IntN(len(durs))], Delay: durs[r.IntN(len(durs))]}, Owner: owners[r.IntN(len(owners))]}
	if r.IntN(4) == 0 {
		res.Error = randString(r)
		res.Reason = limit.Reason(r.IntN(8)) // OK and unknown reasons included
	}
	return res
}

func randResults(r *rand.Rand) ([]limit.Result, []int64, string) {
	owners := []string{"", randString(r), randString(r)}
	results := make([]limit.Result, r.IntN(20))
	limits := make([]int64, len(results))
	for i := range results {
		results[i], limits[i] = randResult(r, owners), randInt(r)
	}
	owner := ""
	switch r.IntN(3) {
	case 0: // Peers: the first result's owner, as the server names it
		if len(results) > 0 {
			owner = results[0].Owner
		}
	case 1:
		owner = randString(r)
	}
	return results, limits, owner
}

// protoResponse is the message the answer stands for, converted by
// ResponseOf: a GetRateLimitsResponse without owner, else a Forward one.
func protoResponse(results []limit.Result, limits []int64, owner string) proto.Message {
	items := make([]*pb.RateLimitResponse, len(results))
	for i := range results {
		r := ResponseOf(&results[i], limits[i], owner)
		items[i] = pbResponse(&r)
	}
	if owner == "" {
		return &pb.GetRateLimitsResponse{Responses: items}
	}
	return &pb.ForwardRateLimitsResponse{Responses: items, Owner: owner}
}

func encodeResults(t testing.TB, results []limit.Result, limits []int64, owner string) []byte {
	t.Helper()
	b, err := AppendResults(nil, results, limits, owner)
	if err != nil {
		t.Fatalf("AppendResults(%+v, %v, %q) = %v", results, limits, owner, err)
	}
	if size := SizeResults(results, limits, owner); len(b) != size {
		t.Fatalf("AppendResults wrote %d bytes, SizeResults = %d", len(b), size)
	}
	return b
}

func TestAppendResultsMatchesProto(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(1, 2))
	for range 3000 {
		results, limits, owner := randResults(r)
		checkSameAsProto(t, protoResponse(results, limits, owner), encodeResults(t, results, limits, owner))
	}
}

// The encoder refuses what proto.Marshal refuses: strings that are not UTF-8.
func TestAppendResultsInvalidUTF8(t *testing.T) {
	t.Parallel()
	bad := "\xff"
	cases := []struct {
		result limit.Result
		owner  string
	}{
		{result: limit.Result{Owner: "a"}, owner: bad},
		{result: limit.Result{Error: bad}},
		{result: limit.Result{Owner: bad}},
		{result: limit.Result{Error: "x", Owner: bad}, owner: bad},
	}
	for _, c := range cases {
		results, limits := []limit.Result{c.result}, []int64{1}
		if _, err := AppendResults(nil, results, limits, c.owner); err == nil {
			t.Errorf("AppendResults(%+v, %q) = nil error, want one", c.result, c.owner)
		}
		if _, err := proto.Marshal(protoResponse(results, limits, c.owner)); err == nil {
			t.Errorf("proto.Marshal(%+v, %q) = nil error; the test case is wrong", c.result, c.owner)
		}
	}
}

// FuzzAppendResults takes the results and limits of any answer proto can
// decode, encodes them again and compares with proto's encoding.
func FuzzAppendResults(f *testing.F) {
	r := rand.New(rand.NewPCG(3, 4))
	for range 8 {
		results, limits, owner := randResults(r)
		b, _ := deterministic.Marshal(protoResponse(results, limits, owner))
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var m pb.ForwardRateLimitsResponse
		if proto.Unmarshal(data, &m) != nil {
			return
		}
		var results []limit.Result
		var limits []int64
		for _, it := range m.GetResponses() {
			resp := responseOfPB(it)
			results, limits = append(results, resp.Result("")), append(limits, it.GetLimit())
		}
		checkSameAsProto(t, protoResponse(results, limits, m.GetOwner()), encodeResults(t, results, limits, m.GetOwner()))
	})
}

// randResponses draws answer items with the server's metadata shapes (none,
// owner only, owner and reason, reason only) and arbitrary ones.
func randResponses(r *rand.Rand) []*pb.RateLimitResponse {
	owners := []string{randString(r), randString(r)}
	items := make([]*pb.RateLimitResponse, r.IntN(20))
	for i := range items {
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
			m.Metadata = map[string]string{MetaReason: randString(r)}
		case 3:
			m.Metadata = map[string]string{MetaOwner: owner, MetaReason: "invalid_argument"}
		case 4:
			m.Metadata = map[string]string{randString(r): randString(r), randString(r): randString(r), MetaOwner: owner}
		default:
			m.Metadata = map[string]string{MetaOwner: owner}
		}
		items[i] = m
	}
	return items
}

// protoResults is the reference for DecodeResults: proto.Unmarshal, then
// Response.Result per item.
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
		r := responseOfPB(it)
		out = append(out, r.Result(owner))
	}
	return out, nil
}

// checkDecodeResultsLikeProto asserts that DecodeResults accepts data
// exactly when proto does and then yields the same results.
func checkDecodeResultsLikeProto(t testing.TB, data []byte, forward bool) {
	t.Helper()
	want, wantErr := protoResults(data, forward)
	got, err := DecodeResults(data, forward, len(data), nil)
	if (err != nil) != (wantErr != nil) {
		t.Fatalf("DecodeResults(%x, forward=%v) error = %v, proto's = %v", data, forward, err, wantErr)
	}
	if err == nil && !reflect.DeepEqual(got, want) && (len(got) != 0 || len(want) != 0) {
		t.Fatalf("DecodeResults(%x, forward=%v) =\n%+v\nwant\n%+v", data, forward, got, want)
	}
}

func TestDecodeResultsMatchesProto(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(5, 6))
	for range 2000 {
		items := randResponses(r)
		get, _ := proto.Marshal(&pb.GetRateLimitsResponse{Responses: items})
		fwd, _ := proto.Marshal(&pb.ForwardRateLimitsResponse{Responses: items, Owner: randString(r)})
		for _, forward := range []bool{false, true} {
			checkDecodeResultsLikeProto(t, get, forward)
			checkDecodeResultsLikeProto(t, fwd, forward)
		}
	}
}

// An answer with more items than asked is refused before they are decoded.
func TestDecodeResultsBound(t *testing.T) {
	t.Parallel()
	data, _ := proto.Marshal(&pb.GetRateLimitsResponse{Responses: []*pb.RateLimitResponse{{}, {}, {}}})
	if _, err := DecodeResults(data, false, 2, nil); err == nil {
		t.Fatalf("DecodeResults(3 items, max 2) = nil error, want one")
	}
	if got, err := DecodeResults(data, false, 3, nil); err != nil || len(got) != 3 {
		t.Fatalf("DecodeResults(3 items, max 3) = %d results, %v", len(got), err)
	}
}

// FuzzDecodeResults: on any bytes, DecodeResults and proto agree.
func FuzzDecodeResults(f *testing.F) {
	r := rand.New(rand.NewPCG(7, 8))
	for range 8 {
		b, _ := proto.Marshal(&pb.ForwardRateLimitsResponse{Responses: randResponses(r), Owner: randString(r)})
		f.Add(b)
	}
	f.Add([]byte("\x0a\x04\x42\x02\x0a\xff")) // a metadata key that is not UTF-8
	f.Fuzz(func(t *testing.T, data []byte) {
		checkDecodeResultsLikeProto(t, data, false)
		checkDecodeResultsLikeProto(t, data, true)
	})
}

// The Peers answer names its owner once; items decided by it carry no
// owner entry and get it back on the client side, failed ones keep theirs.
func TestResultsRoundTrip(t *testing.T) {
	t.Parallel()
	in := []limit.Result{
		{Decision: limit.Decision{Allowed: true, Remaining: 1, ResetAt: 42_000_000}, Owner: "a"},
		{Decision: limit.Decision{Remaining: 2, RetryAfter: 3 * time.Second}, Owner: "a"},
		limit.Failed(limit.Invalid, errText("bad")),
		{Decision: limit.Decision{Allowed: true, Delay: 20 * time.Millisecond}, Owner: "b"},
		{Decision: limit.Decision{RetryAfter: limit.Never}, Owner: "a"},
		{Error: "late", Reason: limit.Closing, Owner: "a"},
	}
	limits := []int64{1, 2, 3, 4, 5, 6}
	for _, owner := range []string{"", "a"} {
		data := encodeResults(t, in, limits, owner)
		got, err := DecodeResults(data, owner != "", len(in), nil)
		if err != nil || !reflect.DeepEqual(got, in) {
			t.Errorf("DecodeResults(AppendResults(%+v, owner %q)) = %+v, %v", in, owner, got, err)
		}
	}
	if with, without := SizeResults(in, limits, ""), SizeResults(in, limits, "a"); without >= with {
		t.Errorf("answer naming its owner once is %d bytes, in every item %d", without, with)
	}
}

// benchResults are n admitted results of one owner, as a node answers.
func benchResults(n int) ([]limit.Result, []int64) {
	results, limits := make([]limit.Result, n), make([]int64, n)
	for i := range results {
		results[i] = limit.Result{Decision: limit.Decision{Allowed: true, Remaining: 99,
			ResetAt: 1_700_000_000_123_456_789}, Owner: "node-a"}
		limits[i] = 100
	}
	return results, limits
}

// BenchmarkAppendResults100 is what a server spends encoding the answer to
// a 100-item request, bounded first as the codec does.
func BenchmarkAppendResults100(b *testing.B) {
	for _, bc := range []struct{ name, owner string }{{"get", ""}, {"forward", "node-a"}} {
		b.Run(bc.name, func(b *testing.B) {
			results, limits := benchResults(100)
			buf := make([]byte, 0, BoundResults(results, bc.owner))
			b.ReportAllocs()
			for b.Loop() {
				bound := BoundResults(results, bc.owner)
				if _, err := AppendResults(buf[:0:bound], results, limits, bc.owner); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkDecodeResults100 is what a client spends decoding that answer.
func BenchmarkDecodeResults100(b *testing.B) {
	results, limits := benchResults(100)
	data, _ := AppendResults(nil, results, limits, "")
	dst := make([]limit.Result, 0, 100)
	b.ReportAllocs()
	for b.Loop() {
		var err error
		if dst, err = DecodeResults(data, false, 100, dst); err != nil {
			b.Fatal(err)
		}
	}
}

// BoundResults is never below what AppendResults writes, and items whose
// length needs one, two or three bytes are encoded as proto.Marshal
// encodes them (AppendResults writes an item's length after the item).
func TestBoundResults(t *testing.T) {
	t.Parallel()
	for _, r := range limit.Reasons() {
		if len(r.String()) > maxReasonLen {
			t.Errorf("reason %q is longer than maxReasonLen %d", r, maxReasonLen)
		}
	}
	r := rand.New(rand.NewPCG(3, 4))
	for range 3000 {
		results, limits, owner := randResults(r)
		b := encodeResults(t, results, limits, owner)
		if bound := BoundResults(results, owner); len(b) > bound {
			t.Fatalf("AppendResults(%+v, %q) wrote %d bytes, BoundResults = %d", results, owner, len(b), bound)
		}
	}
	for _, n := range []int{0, 1, 90, 110, 126, 127, 128, 129, 200, 16_300, 16_400, 70_000} {
		long := strings.Repeat("e", n)
		results := []limit.Result{
			{Error: long, Reason: limit.Unavailable, Owner: "node-a"},
			{Decision: limit.Decision{Allowed: true, Remaining: 5, ResetAt: 1_700_000_000_123_456_789}, Owner: long},
			{Decision: limit.Decision{Remaining: 1}},
		}
		limits := []int64{10, math.MaxInt64, 1}
		for _, owner := range []string{"", "node-a"} {
			b := encodeResults(t, results, limits, owner)
			checkSameAsProto(t, protoResponse(results, limits, owner), b)
			if bound := BoundResults(results, owner); len(b) > bound {
				t.Errorf("strings of %d bytes, owner %q: AppendResults wrote %d bytes, BoundResults = %d", n, owner, len(b), bound)
			}
		}
	}
}
