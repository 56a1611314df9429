package leasing

import (
	"slices"
	"testing"
	"time"

	"github.com/shardlimiter/shardlimiter/limit"
)

func TestRecordsRoundTrip(t *testing.T) {
	recs := []Record{
		{ID: 1 << 62, Lessee: "node-b", Rule: limit.Rule{Algorithm: limit.TokenBucket, Limit: 10, Period: time.Second, Burst: 100}, Hits: 100, Expires: 1e18, End: 0},
		{ID: 7, Lessee: "\x00client/x", Rule: limit.Rule{Algorithm: limit.FixedWindow, Limit: 5, Period: time.Minute}, Hits: 1, Expires: -5, End: 12345},
	}
	b := AppendRecords(nil, recs)
	got, err := DecodeRecords(b)
	if err != nil || !slices.Equal(got, recs) {
		t.Fatalf("DecodeRecords(AppendRecords(%+v)) = %+v, %v", recs, got, err)
	}
	if got, err := DecodeRecords(AppendRecords(nil, nil)); err != nil || len(got) != 0 {
		t.Fatalf("DecodeRecords(none) = %+v, %v", got, err)
	}
	for i := range len(b) { // every truncation is refused
		if _, err := DecodeRecords(b[:i]); err == nil {
			t.Fatalf("DecodeRecords(%d of %d bytes) = nil error", i, len(b))
		}
	}
}

func TestRecordsRefused(t *testing.T) {
	ok := Record{ID: 1, Lessee: "b", Rule: limit.Rule{Algorithm: limit.TokenBucket, Limit: 10, Period: time.Second}, Hits: 10}
	for name, r := range map[string]Record{
		"not leasable":  {ID: 1, Lessee: "b", Rule: limit.Rule{Algorithm: limit.SlidingLog, Limit: 10, Period: time.Second}, Hits: 1},
		"over capacity": {ID: 1, Lessee: "b", Rule: ok.Rule, Hits: 11},
		"no hits":       {ID: 1, Lessee: "b", Rule: ok.Rule},
		"no id":         {Lessee: "b", Rule: ok.Rule, Hits: 1},
		"invalid rule":  {ID: 1, Lessee: "b", Rule: limit.Rule{Algorithm: limit.TokenBucket, Limit: 10}, Hits: 1},
	} {
		if _, err := DecodeRecords(AppendRecords(nil, []Record{ok, r})); err == nil {
			t.Errorf("%s: DecodeRecords(%+v) = nil error", name, r)
		}
	}
	for name, b := range map[string][]byte{
		"version":       {2, 0},
		"too many":      {1, 0xff, 0xff, 0x03},
		"trailing byte": append(AppendRecords(nil, []Record{ok}), 0),
		"long lessee":   {1, 1, 1, 0xff, 0xff, 0x03},
	} {
		if _, err := DecodeRecords(b); err == nil {
			t.Errorf("%s: DecodeRecords(%x) = nil error", name, b)
		}
	}
}
