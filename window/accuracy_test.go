package window

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/shardlimiter/shardlimiter/limit"
)

// Traffic patterns for the accuracy measurement: offered request instants
// (one hit each), sorted, over n periods of p starting at t0 (aligned).
var accuracyPatterns = []struct {
	name  string
	offer func(rng *rand.Rand, lim, p int64, n int) []int64
}{
	{"uniform 2x", func(_ *rand.Rand, lim, p int64, n int) []int64 {
		return every(p/(2*lim), int64(n)*p)
	}},
	{"poisson 1.0x", func(rng *rand.Rand, lim, p int64, n int) []int64 {
		return poisson(rng, float64(p)/float64(lim), int64(n)*p)
	}},
	{"poisson 1.2x", func(rng *rand.Rand, lim, p int64, n int) []int64 {
		return poisson(rng, float64(p)/(1.2*float64(lim)), int64(n)*p)
	}},
	{"edge bursts + 0.5x", func(rng *rand.Rand, lim, p int64, n int) []int64 {
		out := poisson(rng, float64(p)/(0.5*float64(lim)), int64(n)*p)
		for k := range int64(n) {
			for range lim {
				out = append(out, t0+(k+1)*p-1)
			}
		}
		return out
	}},
	{"random bursts", func(rng *rand.Rand, lim, p int64, n int) []int64 {
		var out []int64
		for at := t0; at < t0+int64(n)*p; at += rng.Int64N(p) {
			for range 1 + rng.Int64N(lim) {
				out = append(out, at)
			}
		}
		return out
	}},
	{"adversarial", func(_ *rand.Rand, lim, p int64, n int) []int64 {
		// Limit in the last ns of every other window, then Limit in the
		// last ns but one of the next: the worst case of the estimate.
		var out []int64
		for k := int64(0); k+1 < int64(n); k += 2 {
			for range lim {
				out = append(out, t0+(k+1)*p-1, t0+(k+2)*p-2)
			}
		}
		return out
	}},
}

func every(gap, span int64) []int64 {
	var out []int64
	for at := t0; at < t0+span; at += gap {
		out = append(out, at)
	}
	return out
}

func poisson(rng *rand.Rand, mean float64, span int64) []int64 {
	var out []int64
	for at := t0; at < t0+span; at += int64(rng.ExpFloat64()*mean) + 1 {
		out = append(out, at)
	}
	return out
}

// admitAll offers one hit at each instant and returns the admitted ones.
func admitAll(l limit.Limiter, r limit.Rule, offered []int64) []admit {
	var out []admit
	for _, at := range offered {
		if l.Take("k", at, r, 1).Allowed {
			out = append(out, admit{at, 1})
		}
	}
	return out
}

// overAdmission returns, over the spans [t, t+p) starting at admitted
// instants, the largest and the mean excess over lim.
func overAdmission(all []admit, p, lim int64) (worst int64, mean float64) {
	j, in, sum := 0, int64(0), int64(0)
	for i := range all {
		for ; j < len(all) && all[j].at < all[i].at+p; j++ {
			in += all[j].hits
		}
		if x := in - lim; x > 0 {
			worst = max(worst, x)
			sum += x
		}
		in -= all[i].hits
	}
	return worst, float64(sum) / float64(max(len(all), 1))
}

// wronglyAdmitted returns the share of admitted hits that an exact log
// would have rejected given the same admitted history: more than lim
// admitted in the period ending with them (Cloudflare's measure).
func wronglyAdmitted(all []admit, p, lim int64) float64 {
	j, in, wrong := 0, int64(0), 0
	for i := range all {
		in += all[i].hits
		for ; all[j].at <= all[i].at-p; j++ {
			in -= all[j].hits
		}
		if in > lim {
			wrong++
		}
	}
	return float64(wrong) / float64(max(len(all), 1))
}

// TestSlidingAccuracy drives the same traffic into the sliding-window
// counter and the exact sliding log, and reports how much the counter
// over-admits in period-long spans. It asserts only the proven bounds
// (package doc): at most Limit per aligned window and 2×Limit−1 per span,
// reached by the adversarial pattern; the log never exceeds Limit.
// go test -run TestSlidingAccuracy -v prints the figures.
func TestSlidingAccuracy(t *testing.T) {
	t.Parallel()
	const lim, periods = 100, 200
	p := int64(time.Second)
	sliding := limit.Rule{Algorithm: limit.SlidingWindow, Limit: lim, Period: time.Second}
	exact := limit.Rule{Algorithm: limit.SlidingLog, Limit: lim, Period: time.Second}
	t.Logf("limit %d per %v, %d periods. worst, mean: hits over the limit in spans [t, t+period) starting at admitted hits;", lim, time.Second, periods)
	t.Logf("wrong: share of admitted hits with more than the limit admitted in the period ending with them")
	t.Logf("%-20s %8s %8s %8s %6s %6s %8s %8s", "pattern", "offered", "sliding", "log", "worst", "bound", "mean", "wrong")
	for i, pat := range accuracyPatterns {
		rng := rand.New(rand.NewPCG(7, uint64(i)))
		offered := pat.offer(rng, lim, p, periods)
		slices.Sort(offered)
		got := admitAll(NewSliding(testCfg), sliding, offered)
		ref := admitAll(NewLog(testCfg), exact, offered)
		worst, mean := overAdmission(got, p, lim)
		t.Logf("%-20s %8d %8d %8d %6d %6d %8.4f %7.3f%%", pat.name, len(offered), len(got), len(ref), worst, lim-1, mean, 100*wronglyAdmitted(got, p, lim))
		if w := maxInWindow(got, p); w > lim {
			t.Errorf("%s: sliding admitted %d in one aligned window, limit %d", pat.name, w, lim)
		}
		if worst > lim-1 {
			t.Errorf("%s: sliding admitted %d over the limit in a period, bound %d", pat.name, worst, lim-1)
		}
		if s := maxInSpan(ref, p); s > lim {
			t.Errorf("%s: the exact log admitted %d in a period, limit %d", pat.name, s, lim)
		}
		if pat.name == "adversarial" && worst != lim-1 {
			t.Errorf("adversarial pattern: worst excess %d, want the bound %d (tight)", worst, lim-1)
		}
	}
}
