package transport

import (
	"slices"
	"testing"
	"time"

	"github.com/shardlimiter/shardlimiter/limit"
)

// A key view's leases cross the wire, per lessee, at millisecond
// precision.
func TestViewLeasesRoundTrip(t *testing.T) {
	v := limit.KeyView{Node: "a", Held: true, Limit: 10, Decision: limit.Decision{Allowed: true, Remaining: 4},
		Leases: []limit.LeaseView{{Lessee: "b", Hits: 3, Expires: 5_000_000}, {Lessee: "c", Hits: 2, Expires: 7_000_000}}}
	got := ViewFromPB(ViewToPB(v))
	if !slices.Equal(got.Leases, v.Leases) || got.Remaining != 4 {
		t.Fatalf("round trip: %+v, want %+v", got, v)
	}
	if got := ViewFromPB(ViewToPB(limit.KeyView{Node: "a", Held: true, Limit: 10})); got.Leases != nil {
		t.Errorf("a view without leases came back with %+v", got.Leases)
	}
}

// A lease call crosses the wire for each leased algorithm, and is refused
// for the others.
func TestLeaseRequestAlgorithms(t *testing.T) {
	for _, a := range []limit.Algorithm{limit.TokenBucket, limit.FixedWindow, limit.SlidingWindow} {
		in := limit.LeaseRequest{From: "b", Key: "k", Rule: limit.Rule{Algorithm: a, Limit: 10, Period: time.Second}, Want: 3}
		got, err := LeaseFromProto(LeaseToProto(in))
		if err != nil || got != in {
			t.Errorf("%v: %+v, %v; want %+v", a, got, err, in)
		}
	}
	for _, a := range []limit.Algorithm{limit.LeakyBucket, limit.SlidingLog} {
		in := limit.LeaseRequest{From: "b", Key: "k", Rule: limit.Rule{Algorithm: a, Limit: 10, Period: time.Second}, Want: 3}
		if _, err := LeaseFromProto(LeaseToProto(in)); err == nil {
			t.Errorf("%v: a lease call was accepted", a)
		}
	}
}
