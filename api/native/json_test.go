package native

import (
	"bytes"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/shardlimiter/shardlimiter/transport/server"

	"google.golang.org/protobuf/proto"

	"github.com/shardlimiter/shardlimiter/limit"
	"github.com/shardlimiter/shardlimiter/transport/pb"
	"github.com/shardlimiter/shardlimiter/transport/wire"
)

// A JSON request converts into the checks and failed items its gRPC
// encoding decodes into.
func TestJSONChecksAsGRPC(t *testing.T) {
	t.Parallel()
	reqs := []*pb.RateLimitRequest{
		wireReq("a", 1, nil),
		wireReq("b", 2, func(r *pb.RateLimitRequest) { r.DurationMs = 0 }),
		wireReq("c", 3, func(r *pb.RateLimitRequest) {
			r.Algorithm, r.Burst, r.WarmupMs, r.Behavior = pb.Algorithm_TOKEN_BUCKET, 5, 100, pb.Behavior_RESET
		}),
		wireReq("d", 4, func(r *pb.RateLimitRequest) { r.Algorithm = 9 }),
		wireReq("e", -1, func(r *pb.RateLimitRequest) { r.Algorithm, r.MinIntervalMs = pb.Algorithm_SLIDING_LOG, 7 }),
		wireReq("f", 1, func(r *pb.RateLimitRequest) { r.Behavior = -1 }),
	}
	var fromJSON wire.Checks
	checksFromPB(reqs, &fromJSON)
	data, err := proto.Marshal(&pb.GetRateLimitsRequest{Requests: reqs})
	if err != nil {
		t.Fatal(err)
	}
	var fromGRPC wire.Checks
	if n, err := wire.DecodeChecks(data, len(reqs), &fromGRPC); err != nil || n != len(reqs) {
		t.Fatalf("DecodeChecks = %d, %v", n, err)
	}
	// The exported fields: a decoded batch also keeps memory of its own
	// (its keys' buffer) that a converted one has no use for.
	if !reflect.DeepEqual(fromJSON.Checks, fromGRPC.Checks) || !reflect.DeepEqual(fromJSON.Failed, fromGRPC.Failed) ||
		fromJSON.Internal != fromGRPC.Internal {
		t.Errorf("JSON items convert to\n%+v\ngRPC ones to\n%+v", fromJSON, fromGRPC)
	}
	if len(fromJSON.Checks) != 3 || len(fromJSON.Failed) != 3 {
		t.Errorf("converted %d checks and %d failed items, want 3 and 3", len(fromJSON.Checks), len(fromJSON.Failed))
	}
}

// A JSON answer is the message a gRPC answer encodes, field for field.
func TestJSONResultsAsGRPC(t *testing.T) {
	t.Parallel()
	batch := &server.ResultBatch{
		Results: []limit.Result{
			{Decision: limit.Decision{Allowed: true, Remaining: 9, ResetAt: resetAt}, Owner: "node-a"},
			{Decision: limit.Decision{RetryAfter: limit.Never, ResetAt: resetAt}, Owner: "node-a"},
			limit.Failed(limit.Invalid, errText("duration_ms must be > 0, got 0")),
			{Decision: limit.Decision{Allowed: true, Delay: 1500 * time.Microsecond}, Owner: "node-b"},
			{Decision: limit.Decision{RetryAfter: time.Nanosecond}},
			{Error: "owner down", Reason: limit.Unavailable, Owner: "node-b"},
			{Decision: limit.Decision{Allowed: true}, Owner: "node-a"},
		},
		Limits: []int64{10, 10, 3, 1, 2, 4, 10},
	}
	msg := resultsToPB(batch)
	want, err := proto.MarshalOptions{Deterministic: true}.Marshal(msg)
	if err != nil {
		t.Fatal(err)
	}
	got, err := wire.AppendResults(nil, batch.Results, batch.Limits, "")
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("gRPC answer = %x, %v; the JSON answer %v encodes to %x", got, err, msg, want)
	}
	if a, b := msg.Responses[0].Metadata, msg.Responses[1].Metadata; reflect.ValueOf(a).Pointer() != reflect.ValueOf(b).Pointer() {
		t.Errorf("items of one owner have metadata maps %p and %p, want one shared map", a, b)
	}
}

type errText string

func (e errText) Error() string { return string(e) }

// Enum names in JSON match in any case, as on the command line and in rules
// files; a name that matches nothing fails its item alone, with the names
// it could have been, and the other items are decided.
func TestHTTPEnumNames(t *testing.T) {
	t.Parallel()
	checker := &fakeChecker{Owner: "n1"}
	srv := startHTTP(t, httpConfig{Checker: checker})
	body := `{"requests":[
		{"name":"a","unique_key":"k1","hits":1,"limit":5,"duration_ms":1000,"algorithm":"token_bucket"},
		{"name":"a","unique_key":"k2","hits":1,"limit":5,"duration_ms":1000,"algorithm":"GCRA"},
		{"name":"a","unique_key":"k3","hits":1,"limit":5,"duration_ms":1000,"algorithm":"Sliding_Log","behavior":"reset"},
		{"name":"a","unique_key":"k4","hits":1,"limit":5,"duration_ms":1000,"calendar" :
			"fortnight"},
		{"name":"a","unique_key":"k5","hits":1,"limit":5,"duration_ms":1000,"algorithm":2}]}`
	code, out := do(t, srv, http.MethodPost, "/v1/GetRateLimits", body)
	if code != http.StatusOK {
		t.Fatalf("POST = %d %v, want 200: a bad item must not fail the batch", code, out)
	}
	resps, _ := out["responses"].([]any)
	if len(resps) != 5 {
		t.Fatalf("responses = %v, want 5", out["responses"])
	}
	errText := func(i int) string { s, _ := resps[i].(map[string]any)["error"].(string); return s }
	for _, i := range []int{0, 2, 4} {
		if e := errText(i); e != "" {
			t.Errorf("item %d: error %q, want it decided", i, e)
		}
	}
	for i, want := range map[int]string{1: `unknown algorithm "GCRA": want one of TOKEN_BUCKET, LEAKY_BUCKET`, 3: `unknown calendar "fortnight"`} {
		if e := errText(i); !strings.Contains(e, want) {
			t.Errorf("item %d: error %q, want it to contain %q", i, e, want)
		}
		if st := resps[i].(map[string]any)["status"]; st != "OVER_LIMIT" {
			t.Errorf("item %d: status %v, want OVER_LIMIT beside its error", i, st)
		}
	}
	if len(checker.Got()) != 1 {
		t.Fatalf("checker calls = %d, want 1", len(checker.Got()))
	}
	got := checker.Got()[0]
	if len(got) != 3 || got[0].Rule.Algorithm != limit.TokenBucket || got[1].Rule.Algorithm != limit.SlidingLog ||
		got[1].Rule.Behavior != limit.Reset || got[2].Rule.Algorithm != limit.FixedWindow {
		t.Errorf("checks decided = %+v, want k1 TOKEN_BUCKET, k3 SLIDING_LOG with RESET, k5 FIXED_WINDOW", got)
	}
}

// FuzzDecodeRequest: any body decodes or fails with an error, never a
// panic, and the items it fails for their enum names are items of the
// request.
func FuzzDecodeRequest(f *testing.F) {
	for _, seed := range []string{``, `{}`, `{"requests":[]}`, `{"requests":[{"algorithm":"gcra"}]}`,
		`{"requests":[{"algorithm":"token_bucket","behavior":"Reset"},{"calendar":"x"}]}`,
		`{"x":[{"algorithm":"y"}],"requests":[{"algorithm":{"a":1}}]}`, `{"requests":[{"algorithm":"\u0047CRA"}]}`} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		var req pb.GetRateLimitsRequest
		bad, err := decodeRequest(body, &req)
		if err != nil {
			return
		}
		for _, b := range bad {
			if b.item < 0 || b.item >= len(req.GetRequests()) {
				t.Fatalf("bad enum at item %d of %d", b.item, len(req.GetRequests()))
			}
		}
	})
}
