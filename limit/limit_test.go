package limit

import (
	"math"
	"strings"
	"testing"
	"time"
)

func TestRuleValidate(t *testing.T) {
	t.Parallel()
	ok := Rule{Limit: 10, Period: time.Second}
	cases := []struct {
		name string
		mod  func(*Rule)
		want string // "" = valid
	}{
		{"valid", func(*Rule) {}, ""},
		{"every algorithm", func(r *Rule) { r.Algorithm = SlidingLog }, ""},
		{"unknown algorithm", func(r *Rule) { r.Algorithm = 8 }, "unknown algorithm 8"},
		{"gubernator flag on a native rule", func(r *Rule) { r.Behavior = DrainOverLimit }, "unknown behavior flags 0x8"},
		{"created_at on a native rule", func(r *Rule) { r.CreatedAt = 1 }, "created_at applies to the gubernator algorithms only"},
		{"zero limit", func(r *Rule) { r.Limit = 0 }, "limit must be > 0"},
		{"huge limit", func(r *Rule) { r.Limit = MaxLimit + 1 }, "limit must be <="},
		{"zero period", func(r *Rule) { r.Period = 0 }, "duration_ms must be > 0"},
		{"huge period", func(r *Rule) { r.Period = MaxPeriod + time.Millisecond }, "duration_ms must be <="},
		{"negative burst", func(r *Rule) { r.Burst = -1 }, "burst must be >= 0"},
		{"burst on a window", func(r *Rule) { r.Algorithm = FixedWindow; r.Burst = 3 }, "burst applies to TOKEN_BUCKET and LEAKY_BUCKET only"},
		{"burst on leaky", func(r *Rule) { r.Algorithm = LeakyBucket; r.Burst = 3 }, ""},
		{"warmup on leaky", func(r *Rule) { r.Algorithm = LeakyBucket; r.Warmup = time.Second }, "warmup_ms applies to TOKEN_BUCKET only"},
		{"negative warmup", func(r *Rule) { r.Warmup = -time.Millisecond }, "warmup_ms must be >= 0"},
		{"min interval on a bucket", func(r *Rule) { r.MinInterval = time.Second }, "min_interval_ms applies to SLIDING_LOG only"},
		{"min interval on the log", func(r *Rule) { r.Algorithm = SlidingLog; r.MinInterval = time.Second }, ""},
		{"log limit at the bound", func(r *Rule) { r.Algorithm = SlidingLog; r.Limit = MaxLogLimit }, ""},
		{"log limit too large", func(r *Rule) { r.Algorithm = SlidingLog; r.Limit = MaxLogLimit + 1 }, "SLIDING_LOG limit must be <="},
		{"log with overdraft at the bound", func(r *Rule) { r.Algorithm = SlidingLog; r.Limit = MaxLogLimit; r.Behavior = Overdraft }, "with OVERDRAFT"},
		{"log with overdraft under the bound", func(r *Rule) { r.Algorithm = SlidingLog; r.Limit = MaxLogLimit - 1; r.Behavior = Overdraft }, ""},
		{"log limit of 100000", func(r *Rule) { r.Algorithm = SlidingLog; r.Limit = 100_000 },
			"SLIDING_LOG limit must be <= 65536 (the log keeps one entry per admitted action); use SLIDING_WINDOW for larger limits, got 100000"},
		{"window limit of 100000", func(r *Rule) { r.Algorithm = SlidingWindow; r.Limit = 100_000 }, ""},
		{"unknown behavior", func(r *Rule) { r.Behavior = 8 }, "unknown behavior flags 0x8"},
		{"refill too long", func(r *Rule) { r.Limit = 1; r.Burst = MaxLimit; r.Period = MaxPeriod }, "to refill"},
	}
	for _, tc := range cases {
		r := ok
		tc.mod(&r)
		err := r.Validate()
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: Validate(%+v) = %v, want nil", tc.name, r, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: Validate(%+v) = %v, want %q", tc.name, r, err, tc.want)
		}
	}
}

func TestCheckValidate(t *testing.T) {
	t.Parallel()
	ok := Check{Name: "api", Key: "account:42", Hits: 1, Rule: Rule{Limit: 1, Period: time.Second}}
	cases := []struct {
		mod  func(*Check)
		want string
	}{
		{func(c *Check) { c.Name = "" }, "name is empty"},
		{func(c *Check) { c.Name = strings.Repeat("n", MaxNameLen+1) }, "name is 129 bytes"},
		{func(c *Check) { c.Name = "\xff" }, "not valid UTF-8"},
		{func(c *Check) { c.Key = "" }, "unique_key is empty"},
		{func(c *Check) { c.Key = strings.Repeat("k", MaxKeyLen+1) }, "unique_key is 1025 bytes"},
		{func(c *Check) { c.Hits = -1 }, "hits must be >= 0"},
		{func(c *Check) { c.Hits = MaxHits + 1 }, "hits must be <="},
		{func(c *Check) { c.Rule.Limit = 0 }, "limit must be > 0"},
	}
	if err := ok.Validate(); err != nil {
		t.Fatalf("Validate(%+v) = %v", ok, err)
	}
	for _, tc := range cases {
		c := ok
		tc.mod(&c)
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Validate(%+v) = %v, want %q", c, err, tc.want)
		}
	}
}

func TestNamesAndFlags(t *testing.T) {
	t.Parallel()
	if got := SlidingWindow.String(); got != "SLIDING_WINDOW" {
		t.Errorf("SlidingWindow.String() = %q", got)
	}
	if got := Algorithm(9).String(); got != "ALGORITHM(9)" {
		t.Errorf("Algorithm(9).String() = %q", got)
	}
	if b := Reset | CountRejected; !b.Has(Reset) || !b.Has(CountRejected) || Reset.Has(CountRejected) {
		t.Errorf("Behavior.Has is wrong for %v", b)
	}
	if Unavailable.String() != "unavailable" || Reason(99).String() != "internal" {
		t.Errorf("Reason names: %q %q", Unavailable, Reason(99))
	}
	if r := Failed(Invalid, errString("bad")); r.Error != "bad" || r.Reason != Invalid || r.Allowed {
		t.Errorf("Failed = %+v", r)
	}
}

type errString string

func (e errString) Error() string { return string(e) }

func TestMillisToNanos(t *testing.T) {
	t.Parallel()
	const ns = int64(time.Millisecond)
	for _, c := range []struct{ ms, want int64 }{
		{0, 0}, {1, 1e6}, {-3, -3e6},
		{math.MaxInt64 / ns, math.MaxInt64 / ns * ns},
		{math.MaxInt64/ns + 1, math.MaxInt64}, {math.MaxInt64, math.MaxInt64},
		{math.MinInt64/ns - 1, math.MinInt64}, {math.MinInt64, math.MinInt64},
	} {
		if got := MillisToNanos(c.ms); got != c.want {
			t.Errorf("MillisToNanos(%d) = %d, want %d", c.ms, got, c.want)
		}
	}
}
