package window

import (
	"testing"
	"time"

	"github.com/shardlimiter/shardlimiter/limit"
	"github.com/shardlimiter/shardlimiter/table"
)

// A lease's grant takes its hits from the current window; what the lessee
// did not use comes back through Credit, into that window only, never
// more than it counts. The steps run at named instants on one key of 10
// hits per second.
func TestCreditStepTable(t *testing.T) {
	const t0 = int64(1_000) * int64(time.Second) // a window start
	for _, alg := range []limit.Algorithm{limit.FixedWindow, limit.SlidingWindow} {
		r := limit.Rule{Algorithm: alg, Limit: 10, Period: time.Second}
		var tbl interface {
			Take(string, int64, limit.Rule, int64) limit.Decision
			Credit(string, int64, limit.Rule, int64) int64
		}
		if alg == limit.FixedWindow {
			tbl = NewFixed(table.Config{})
		} else {
			tbl = NewSliding(table.Config{})
		}
		steps := []struct {
			name         string
			at           int64
			credit, take int64
			want         int64 // hits credited, or remaining after the take
		}{
			{"a grant of 6 takes 6", t0 + 100, 0, 6, 4},
			{"the owner takes what is left", t0 + 200, 0, 4, 0},
			{"the lessee gives back 3 of its 6", t0 + 300, 3, 0, 3},
			{"those 3 can be taken again", t0 + 400, 0, 3, 0},
			{"more than the window counts is not credited", t0 + 500, 20, 0, 10},
			{"an unknown key is credited nothing", t0 + 500, 0, 0, 10},
		}
		for _, s := range steps {
			key := "k"
			if s.name == "an unknown key is credited nothing" {
				if got := tbl.Credit("other", s.at, r, 5); got != 0 {
					t.Errorf("%v: %s: credited %d, want 0", alg, s.name, got)
				}
				continue
			}
			if s.credit > 0 {
				if got := tbl.Credit(key, s.at, r, s.credit); got != s.want {
					t.Errorf("%v: %s: credited %d, want %d", alg, s.name, got, s.want)
				}
				continue
			}
			if d := tbl.Take(key, s.at, r, s.take); !d.Allowed || d.Remaining != s.want {
				t.Errorf("%v: %s: %+v, want allowed with %d remaining", alg, s.name, d, s.want)
			}
		}
		// The next window counts nothing to credit: a hit taken in the
		// last window left its count with it.
		next := t0 + int64(time.Second) + 1
		tbl.Take("k2", next-2, r, 5)
		if got := tbl.Credit("k2", next, r, 5); got != 0 {
			t.Errorf("%v: credited %d into the next window, want 0", alg, got)
		}
		if d := tbl.Take("k2", next, r, 0); alg == limit.FixedWindow && d.Remaining != 10 {
			t.Errorf("%v: the next window after a refused credit: %+v, want 10 remaining", alg, d)
		}
		if got := End(r, t0+300); got != t0+int64(time.Second) {
			t.Errorf("End = %d, want %d", got, t0+int64(time.Second))
		}
	}
}
