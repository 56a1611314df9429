package gubernatorcompat

import (
	"bytes"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	guber "github.com/gubernator-io/gubernator/v2"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// The cases of gubernator's functional_test.go that use its public API,
// one node. Where gubernator's test freezes its clock and advances it,
// these send created_at from a clock of their own (the leaky bucket leaks
// by created_at) or wait for real time to pass (a key expires by the
// node's clock); each test says which.

const (
	under = guber.Status_UNDER_LIMIT
	over  = guber.Status_OVER_LIMIT
)

// play sends steps of one request shape and checks each answer; with
// clock non-nil it sends created_at = *clock and advances it by each
// step's advance.
func play(t *testing.T, c guber.V1Client, base *guber.RateLimitReq, clock *int64, steps []step, check func(t *testing.T, s step, createdAt int64, r *guber.RateLimitResp)) {
	t.Helper()
	for _, s := range steps {
		r := proto.Clone(base).(*guber.RateLimitReq)
		r.Hits = s.hits
		var createdAt int64
		if clock != nil {
			createdAt = *clock
			r.CreatedAt = at(createdAt)
		}
		got := get(t, c, r)
		if got.Error != "" || got.Status != s.status || got.Remaining != s.remaining || got.Limit != base.Limit {
			t.Errorf("%s: hits %d = %v, want %v remaining %d limit %d", s.name, s.hits, got, s.status, s.remaining, base.Limit)
		}
		if check != nil {
			check(t, s, createdAt, got)
		}
		if clock != nil {
			*clock += s.advance.Milliseconds()
		}
	}
}

func TestOverTheLimit(t *testing.T) {
	t.Parallel()
	n := start(t, "over-the-limit", "")
	play(t, n.client, &guber.RateLimitReq{Name: "test_over_limit", UniqueKey: "account:1234",
		Algorithm: guber.Algorithm_TOKEN_BUCKET, Duration: guber.Second * 9, Limit: 2}, nil, []step{
		{name: "1", hits: 1, remaining: 1, status: under},
		{name: "2", hits: 1, remaining: 0, status: under},
		{name: "3", hits: 1, remaining: 0, status: over},
	}, func(t *testing.T, s step, _ int64, r *guber.RateLimitResp) {
		if r.ResetTime == 0 {
			t.Errorf("%s: reset_time 0", s.name)
		}
	})
}

func TestMultipleAsync(t *testing.T) {
	t.Parallel()
	n := start(t, "multiple-async", "")
	resp, err := n.client.GetRateLimits(ctx(t), &guber.GetRateLimitsReq{Requests: []*guber.RateLimitReq{
		{Name: "test_multiple_async", UniqueKey: "account:9234", Duration: guber.Second * 9, Limit: 2, Hits: 1},
		{Name: "test_multiple_async", UniqueKey: "account:5678", Duration: guber.Second * 9, Limit: 10, Hits: 5},
	}})
	if err != nil || len(resp.Responses) != 2 {
		t.Fatalf("GetRateLimits = %v, %v", resp, err)
	}
	if r := resp.Responses[0]; r.Status != under || r.Remaining != 1 || r.Limit != 2 {
		t.Errorf("item 0 = %v", r)
	}
	if r := resp.Responses[1]; r.Status != under || r.Remaining != 5 || r.Limit != 10 {
		t.Errorf("item 1 = %v", r)
	}
}

// gubernator freezes its clock and advances it 100 ms past the 5 ms
// window; here the test waits for the node's clock to pass reset_time.
func TestTokenBucket(t *testing.T) {
	t.Parallel()
	n := start(t, "token-bucket", "")
	r := &guber.RateLimitReq{Name: "test_token_bucket", UniqueKey: "account:1234", Duration: guber.Millisecond * 5, Limit: 2, Hits: 1}
	first := get(t, n.client, r)
	second := get(t, n.client, r)
	switch {
	case first.Error != "" || second.Error != "" || first.Status != under || second.Status != under || first.Remaining != 1:
		t.Fatalf("first two hits = %v, %v", first, second)
	case second.Remaining == 0 && second.ResetTime == first.ResetTime && first.ResetTime != 0: // one window
	case second.Remaining == 1 && second.ResetTime > first.ResetTime:
		// the 5 ms window ended between the two calls (a slow machine):
		// the second started a new one, as gubernator's would
	default:
		t.Fatalf("first two hits = %v, %v; want remaining 1 then 0 in one window", first, second)
	}
	reset := second.ResetTime
	eventually(t, 5*time.Second, "the window to end", func() bool { return time.Now().UnixMilli() > reset })
	if got := get(t, n.client, r); got.Error != "" || got.Status != under || got.Remaining != 1 || got.ResetTime <= reset {
		t.Errorf("after the window = %v, want remaining 1 in a new window", got)
	}
}

// gubernator's negative-hits and more-than-available tests freeze the
// clock so that their windows (5 ms, 1 s) never end; a token bucket
// expires by the node's clock, so here the windows are a minute, which
// the calls never outlast.
func TestTokenBucketNegativeHits(t *testing.T) {
	t.Parallel()
	n := start(t, "token-negative", "")
	play(t, n.client, &guber.RateLimitReq{Name: "test_token_bucket_negative", UniqueKey: "account:12345",
		Duration: guber.Minute, Limit: 2}, nil, []step{
		{name: "remaining should be three", hits: -1, remaining: 3, status: under},
		{name: "remaining should be four", hits: -1, remaining: 4, status: under},
		{name: "remaining should be 0", hits: 4, remaining: 0, status: under},
		{name: "remaining should be 1", hits: -1, remaining: 1, status: under},
	}, nil)
}

func TestTokenBucketRequestMoreThanAvailable(t *testing.T) {
	t.Parallel()
	n := start(t, "token-more", "")
	play(t, n.client, &guber.RateLimitReq{Name: "test_token_more_than_available", UniqueKey: "account:123456",
		Duration: guber.Minute, Limit: 2000}, nil, []step{
		{name: "use half", hits: 1000, remaining: 1000, status: under},
		{name: "more than left: nothing consumed", hits: 1500, remaining: 1000, status: over},
		{name: "500", hits: 500, remaining: 500, status: under},
		{name: "400", hits: 400, remaining: 100, status: under},
		{name: "100", hits: 100, remaining: 0, status: under},
		{name: "1 over", hits: 1, remaining: 0, status: over},
	}, nil)
}

// gubernator advances its frozen clock 61 s into the next minute; here the
// test starts early enough in a minute for its first four calls to share
// it, then waits for the next minute on the node's clock.
func TestTokenBucketGregorian(t *testing.T) {
	t.Parallel()
	n := start(t, "token-gregorian", "")
	awaitEarlyInMinute(t)
	base := &guber.RateLimitReq{Name: "test_token_bucket_greg", UniqueKey: "account:12345",
		Behavior: guber.Behavior_DURATION_IS_GREGORIAN, Duration: guber.GregorianMinutes, Limit: 60}
	minuteEnd := time.Now().Truncate(time.Minute).Add(time.Minute).UnixMilli() - 1
	play(t, n.client, base, nil, []step{
		{name: "first hit", hits: 1, remaining: 59, status: under},
		{name: "second hit", hits: 1, remaining: 58, status: under},
		{name: "consume remaining hits", hits: 58, remaining: 0, status: under},
		{name: "should be over the limit", hits: 1, remaining: 0, status: over},
	}, func(t *testing.T, s step, _ int64, r *guber.RateLimitResp) {
		if r.ResetTime != minuteEnd {
			t.Errorf("%s: reset_time %d, want the minute's last ms %d", s.name, r.ResetTime, minuteEnd)
		}
	})
	eventually(t, 70*time.Second, "the next minute", func() bool { return time.Now().UnixMilli() > minuteEnd })
	play(t, n.client, base, nil, []step{{name: "should be under the limit", hits: 0, remaining: 60, status: under}}, nil)
}

// awaitEarlyInMinute returns once the clock is at most 50 s into a minute,
// so that a few calls made now share their Gregorian minute.
func awaitEarlyInMinute(t *testing.T) {
	eventually(t, 15*time.Second, "a minute's first 50 s", func() bool { return time.Now().Second() < 50 })
}

func TestDrainOverLimit(t *testing.T) {
	t.Parallel()
	n := start(t, "drain", "")
	steps := []step{
		{name: "check remaining before hit", hits: 0, remaining: 10, status: under},
		{name: "first hit", hits: 1, remaining: 9, status: under},
		{name: "over limit hit", hits: 100, remaining: 0, status: over},
		{name: "check remaining", hits: 0, remaining: 0, status: under},
	}
	for i, alg := range []guber.Algorithm{guber.Algorithm_TOKEN_BUCKET, guber.Algorithm_LEAKY_BUCKET} {
		t.Run(alg.String(), func(t *testing.T) {
			play(t, n.client, &guber.RateLimitReq{Name: "test_drain_over_limit", UniqueKey: "account:1234:" + string(rune('0'+i)),
				Algorithm: alg, Behavior: guber.Behavior_DRAIN_OVER_LIMIT, Duration: guber.Second * 30, Limit: 10}, nil, steps,
				func(t *testing.T, s step, _ int64, r *guber.RateLimitResp) {
					if r.ResetTime == 0 {
						t.Errorf("%s: reset_time 0", s.name)
					}
				})
		})
	}
}

// gubernator freezes its clock and advances it; here created_at comes from
// the test's clock, which starts now and advances as gubernator's does
// (a leaky bucket leaks by created_at).
func leakyReset(limit int64) func(t *testing.T, s step, createdAt int64, r *guber.RateLimitResp) {
	return func(t *testing.T, s step, createdAt int64, r *guber.RateLimitResp) {
		// gubernator's check: reset_time = now + (limit - remaining) × 3 s
		if want := createdAt + (limit-r.Remaining)*3000; r.ResetTime != want {
			t.Errorf("%s: reset_time %d, want %d", s.name, r.ResetTime, want)
		}
	}
}

func TestLeakyBucket(t *testing.T) {
	t.Parallel()
	n := start(t, "leaky", "")
	clock := time.Now().UnixMilli()
	play(t, n.client, &guber.RateLimitReq{Name: "test_leaky_bucket", UniqueKey: "account:1234",
		Algorithm: guber.Algorithm_LEAKY_BUCKET, Duration: guber.Second * 30, Limit: 10}, &clock, []step{
		{"first hit", 1, 9, under, time.Second},
		{"second hit; no leak", 1, 8, under, time.Second},
		{"third hit; no leak", 1, 7, under, 1500 * time.Millisecond},
		{"should leak one hit 3 seconds after first hit", 0, 8, under, 3 * time.Second},
		{"3 Seconds later we should have leaked another hit", 0, 9, under, 0},
		{"max out our bucket and sleep for 3 seconds", 9, 0, under, 0},
		{"should be over the limit", 1, 0, over, 3 * time.Second},
		{"should have leaked 1 hit", 0, 1, under, 60 * time.Second},
		{"should max out the limit", 0, 10, under, 60 * time.Second},
		{"should use up the limit and wait until 1 second before duration period", 10, 0, under, 29 * time.Second},
		{"should use up all hits one second before duration period", 9, 0, under, 3 * time.Second},
		{"only have 1 hit remaining", 1, 0, under, time.Second},
	}, leakyReset(10))
}

func TestLeakyBucketWithBurst(t *testing.T) {
	t.Parallel()
	n := start(t, "leaky-burst", "")
	clock := time.Now().UnixMilli()
	play(t, n.client, &guber.RateLimitReq{Name: "test_leaky_bucket_with_burst", UniqueKey: "account:1234",
		Algorithm: guber.Algorithm_LEAKY_BUCKET, Duration: guber.Second * 30, Limit: 10, Burst: 20}, &clock, []step{
		{"first hit", 1, 19, under, time.Second},
		{"second hit; no leak", 1, 18, under, time.Second},
		{"third hit; no leak", 1, 17, under, 1500 * time.Millisecond},
		{"should leak one hit 3 seconds after first hit", 0, 18, under, 3 * time.Second},
		{"3 Seconds later we should have leaked another hit", 0, 19, under, 0},
		{"max out our bucket and sleep for 3 seconds", 19, 0, under, 0},
		{"should be over the limit", 1, 0, over, 3 * time.Second},
		{"should have leaked 1 hit", 0, 1, under, 60 * time.Second},
		{"should max out remaining", 0, 20, under, time.Second},
	}, leakyReset(10))
}

// The minute's rate (60 000 ms / 60) leaks by created_at; the key's period
// ends with the node's minute, so the calls start early in one.
func TestLeakyBucketGregorian(t *testing.T) {
	t.Parallel()
	n := start(t, "leaky-gregorian", "")
	awaitEarlyInMinute(t)
	clock := time.Now().UnixMilli()
	play(t, n.client, &guber.RateLimitReq{Name: t.Name(), UniqueKey: guber.RandomString(10),
		Algorithm: guber.Algorithm_LEAKY_BUCKET, Behavior: guber.Behavior_DURATION_IS_GREGORIAN,
		Duration: guber.GregorianMinutes, Limit: 60}, &clock, []step{
		{"first hit", 1, 59, under, 500 * time.Millisecond},
		{"second hit; no leak", 1, 58, under, 1200 * time.Millisecond},
		{"third hit; leak one hit", 1, 58, under, 0},
	}, func(t *testing.T, s step, createdAt int64, r *guber.RateLimitResp) {
		if r.ResetTime < createdAt {
			t.Errorf("%s: reset_time %d before created_at %d", s.name, r.ResetTime, createdAt)
		}
	})
}

func TestLeakyBucketNegativeHits(t *testing.T) {
	t.Parallel()
	n := start(t, "leaky-negative", "")
	clock := time.Now().UnixMilli()
	play(t, n.client, &guber.RateLimitReq{Name: "test_leaky_bucket_negative", UniqueKey: "account:12345",
		Algorithm: guber.Algorithm_LEAKY_BUCKET, Duration: guber.Second * 30, Limit: 10}, &clock, []step{
		{"first hit", 1, 9, under, 0},
		{"can increase remaining", -1, 10, under, 0},
		{"remaining should be zero", 10, 0, under, 0},
		{"can append one to remaining when remaining is zero", -1, 1, under, 0},
	}, leakyReset(10))
}

// Frozen in gubernator so that nothing leaks (2 hits a millisecond): here
// every call has the same created_at.
func TestLeakyBucketRequestMoreThanAvailable(t *testing.T) {
	t.Parallel()
	n := start(t, "leaky-more", "")
	clock := time.Now().UnixMilli()
	play(t, n.client, &guber.RateLimitReq{Name: "test_leaky_more_than_available", UniqueKey: "account:123456",
		Algorithm: guber.Algorithm_LEAKY_BUCKET, Duration: guber.Millisecond * 1000, Limit: 2000}, &clock, []step{
		{"use half", 1000, 1000, under, 0},
		{"more than left", 1500, 1000, over, 0},
		{"500", 500, 500, under, 0},
		{"400", 400, 100, under, 0},
		{"100", 100, 0, under, 0},
		{"1 over", 1, 0, over, 0},
	}, nil)
}

// Frozen in gubernator: here both calls have the same created_at.
func TestLeakyBucketDivBug(t *testing.T) {
	t.Parallel()
	n := start(t, "leaky-div", "")
	clock := time.Now().UnixMilli()
	play(t, n.client, &guber.RateLimitReq{Name: t.Name(), UniqueKey: guber.RandomString(10),
		Algorithm: guber.Algorithm_LEAKY_BUCKET, Duration: guber.Millisecond * 1000, Limit: 2000}, &clock, []step{
		{"1999", 1, 1999, under, 0},
		{"rate 0.5 ms a hit", 100, 1899, under, 0},
	}, nil)
}

func TestMissingFields(t *testing.T) {
	t.Parallel()
	n := start(t, "missing-fields", "")
	for i, c := range []struct {
		req    *guber.RateLimitReq
		status guber.Status
		err    string
	}{
		{&guber.RateLimitReq{Name: "test_missing_fields", UniqueKey: "account:1234", Hits: 1, Limit: 10, Duration: 0}, under, ""},
		{&guber.RateLimitReq{Name: "test_missing_fields", UniqueKey: "account:12345", Hits: 1, Duration: 10000, Limit: 0}, over, ""},
		{&guber.RateLimitReq{UniqueKey: "account:1234", Hits: 1, Duration: 10000, Limit: 5}, under, "field 'namespace' cannot be empty"},
		{&guber.RateLimitReq{Name: "test_missing_fields", Hits: 1, Duration: 10000, Limit: 5}, under, "field 'unique_key' cannot be empty"},
	} {
		if r := get(t, n.client, c.req); r.Error != c.err || r.Status != c.status {
			t.Errorf("case %d: %v, want error %q status %v", i, r, c.err, c.status)
		}
	}
}

func TestChangeLimit(t *testing.T) {
	t.Parallel()
	n := start(t, "change-limit", "")
	for _, c := range []struct {
		name      string
		alg       guber.Algorithm
		limit     int64
		remaining int64
	}{
		{"Should subtract 1 from remaining", guber.Algorithm_TOKEN_BUCKET, 100, 99},
		{"Should subtract 1 from remaining", guber.Algorithm_TOKEN_BUCKET, 100, 98},
		{"Should subtract 1 from remaining and change limit to 10", guber.Algorithm_TOKEN_BUCKET, 10, 7},
		{"Should subtract 1 from remaining with new limit of 10", guber.Algorithm_TOKEN_BUCKET, 10, 6},
		{"Should subtract 1 from remaining with new limit of 200", guber.Algorithm_TOKEN_BUCKET, 200, 195},
		{"Should subtract 1 from remaining for leaky bucket", guber.Algorithm_LEAKY_BUCKET, 100, 99},
		{"Should subtract 1 from remaining for leaky bucket after limit change", guber.Algorithm_LEAKY_BUCKET, 10, 9},
		{"Should subtract 1 from remaining for leaky bucket with new limit", guber.Algorithm_LEAKY_BUCKET, 10, 8},
	} {
		r := get(t, n.client, &guber.RateLimitReq{Name: "test_change_limit", UniqueKey: "account:1234",
			Algorithm: c.alg, Duration: guber.Millisecond * 9000, Limit: c.limit, Hits: 1})
		if r.Status != under || r.Remaining != c.remaining || r.Limit != c.limit || r.ResetTime == 0 {
			t.Errorf("%s: %v, want remaining %d limit %d", c.name, r, c.remaining, c.limit)
		}
	}
}

func TestResetRemaining(t *testing.T) {
	t.Parallel()
	n := start(t, "reset-remaining", "")
	for _, c := range []struct {
		name      string
		behavior  guber.Behavior
		remaining int64
	}{
		{"Should subtract 1 from remaining", guber.Behavior_BATCHING, 99},
		{"Should subtract 2 from remaining", guber.Behavior_BATCHING, 98},
		{"Should reset the remaining", guber.Behavior_RESET_REMAINING, 100},
		{"Should subtract 1 from remaining after reset", guber.Behavior_BATCHING, 99},
	} {
		r := get(t, n.client, &guber.RateLimitReq{Name: "test_reset_remaining", UniqueKey: "account:1234",
			Duration: guber.Millisecond * 9000, Behavior: c.behavior, Limit: 100, Hits: 1})
		if r.Status != under || r.Remaining != c.remaining || r.Limit != 100 {
			t.Errorf("%s: %v, want remaining %d", c.name, r, c.remaining)
		}
	}
}

// One node is its own only peer; stopped, it answers no more.
func TestHealthCheck(t *testing.T) {
	t.Parallel()
	n := start(t, "health", "")
	eventually(t, 10*time.Second, "healthy", func() bool {
		h, err := n.client.HealthCheck(ctx(t), &guber.HealthCheckReq{})
		return err == nil && h.Status == "healthy"
	})
	h, err := n.client.HealthCheck(ctx(t), &guber.HealthCheckReq{})
	if err != nil || h.PeerCount != 1 {
		t.Errorf("HealthCheck = %v, %v; want itself as its one peer", h, err)
	}
	if _, err := n.client.LiveCheck(ctx(t), &guber.LiveCheckReq{}); err != nil {
		t.Errorf("LiveCheck = %v", err)
	}
	n.stop(t)
	if _, err := n.client.HealthCheck(ctx(t), &guber.HealthCheckReq{}); err == nil {
		t.Error("HealthCheck of a stopped node = nil error")
	}
}

func TestGRPCGateway(t *testing.T) {
	t.Parallel()
	n := start(t, "gateway", "")
	eventually(t, 10*time.Second, "healthy over HTTP", func() bool {
		resp, err := http.Get("http://" + n.gubHTTP + "/v1/HealthCheck")
		if err == nil {
			resp.Body.Close()
		}
		return err == nil && resp.StatusCode == http.StatusOK
	})
	resp, err := http.Get("http://" + n.gubHTTP + "/v1/HealthCheck")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	// proto names, as gubernator's test insists
	for _, f := range []string{"peer_count", "local_peers", "region_peers"} {
		if !strings.Contains(string(b), f) {
			t.Errorf("HealthCheck body %s lacks %q", b, f)
		}
	}
	// the client's version (v2.13) predates local_peers: read it as JSON
	var hc guber.HealthCheckResp
	if err := (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(b, &hc); err != nil || hc.PeerCount != 1 || hc.Status != "healthy" ||
		!strings.Contains(string(b), `"local_peers":[{"grpc_address":"`+n.grpc+`"`) {
		t.Errorf("HealthCheck %s: %v, %v", b, &hc, err)
	}
	payload, err := protojson.Marshal(&guber.GetRateLimitsReq{Requests: []*guber.RateLimitReq{
		{Name: t.Name(), UniqueKey: guber.RandomString(10), Duration: guber.Millisecond * 1000, Hits: 1, Limit: 10}}})
	if err != nil {
		t.Fatal(err)
	}
	resp, err = http.Post("http://"+n.gubHTTP+"/v1/GetRateLimits", "application/json", bytes.NewReader(payload))
	if err != nil {
		t.Fatal(err)
	}
	b, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	var r guber.GetRateLimitsResp
	if resp.StatusCode != http.StatusOK || protojson.Unmarshal(b, &r) != nil || len(r.Responses) != 1 ||
		r.Responses[0].Status != under || r.Responses[0].Remaining != 9 {
		t.Errorf("POST /v1/GetRateLimits = %d %s", resp.StatusCode, b)
	}
}

func TestBatchTooLarge(t *testing.T) {
	t.Parallel()
	n := start(t, "batch-too-large", "")
	req := &guber.GetRateLimitsReq{}
	for range 1001 {
		req.Requests = append(req.Requests, &guber.RateLimitReq{Name: "n", UniqueKey: "k", Limit: 1, Duration: 1000})
	}
	_, err := n.client.GetRateLimits(ctx(t), req)
	if err == nil || !strings.Contains(err.Error(), "OutOfRange") || !strings.Contains(err.Error(), "Requests.RateLimits list too large; max size is '1000'") {
		t.Errorf("1001 items: %v, want OUT_OF_RANGE with gubernator's text", err)
	}
}
