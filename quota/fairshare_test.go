package quota

import (
	"math"
	"testing"
)

func TestFairSharesSkew(t *testing.T) {
	// Two instances want 10/s, four want 1000/s, under 600/s: the small
	// ones get their demand, the large ones split the remaining 580.
	got := FairShares(600, []float64{10, 1000, 10, 1000, 1000, 1000})
	want := []float64{10, 145, 10, 145, 145, 145}
	sum := 0.0
	for i := range want {
		if math.Abs(got[i]-want[i]) > 1e-9 {
			t.Errorf("FairShares(600, skew)[%d] = %v, want %v", i, got[i], want[i])
		}
		sum += got[i]
	}
	if sum > 600+1e-9 {
		t.Errorf("sum of shares = %v, over the limit 600", sum)
	}
}

func TestFairSharesCases(t *testing.T) {
	for _, tc := range []struct {
		name    string
		limit   float64
		demands []float64
		want    []float64
	}{
		{"under the limit: everyone satisfied", 100, []float64{10, 20, 30}, []float64{10, 20, 30}},
		{"all large: equal split", 90, []float64{1000, 500, 200}, []float64{30, 30, 30}},
		{"one small", 90, []float64{5, 500, 200}, []float64{5, 42.5, 42.5}},
		{"bad demands count as zero", 10, []float64{-1, math.NaN(), math.Inf(1)}, []float64{0, 0, 10}},
		{"no limit", 0, []float64{1, 2}, []float64{0, 0}},
		{"none", 10, nil, []float64{}},
	} {
		got := FairShares(tc.limit, tc.demands)
		if len(got) != len(tc.want) {
			t.Fatalf("%s: FairShares = %v, want %v", tc.name, got, tc.want)
		}
		for i := range got {
			if math.Abs(got[i]-tc.want[i]) > 1e-9 {
				t.Errorf("%s: FairShares(%v, %v) = %v, want %v", tc.name, tc.limit, tc.demands, got, tc.want)
				break
			}
		}
	}
}
