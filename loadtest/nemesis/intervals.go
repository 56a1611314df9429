package nemesis

import (
	"fmt"
	"strings"
	"time"
)

// The interval scan of the nemesis checker. A key over-admitted when, for
// some span [s, e), the hits admitted by checks sent at s or later and
// answered before e exceed the bound a single perfect limiter gives for
// decisions within [s, e) (bounds.go): those decisions all fell in the
// span, whatever their exact instants, so the excess is certain. The scan
// tries every span on a grid of scanTick ending at most shortSpan back,
// and every span on whole seconds up to longSpan back (slow leaks).
const (
	scanTick   = 100 * time.Millisecond
	shortSpan  = 50  // ticks: every start up to 5 s back
	longSpan   = 200 // ticks: starts on whole seconds up to 20 s back
	recentSpan = 10  // ticks: spans this short say when answers were exact again
	lagCap     = 50  // ticks: answers later than this after their send are left out (the count stays a lower bound)
)

// tickIndex maps a Unix-ns instant to its tick from the load's start.
func (c *Judge) tickIndex(t int64) int { return int((t - c.Start) / int64(scanTick)) }

func (c *Judge) tickTime(i int) int64 { return c.Start + int64(i)*int64(scanTick) }

// prepareTicks builds the per-tick prefix sums of counted fallbacks and of
// each fault kind in effect.
func (c *Judge) prepareTicks() {
	c.ticks = c.tickIndex(c.end) + 2
	mark := func(from, to int64, into []int32) {
		for i := max(c.tickIndex(from), 0); i <= min(c.tickIndex(to), c.ticks-1); i++ {
			into[i+1] = 1
		}
	}
	c.countedPre = make([]int32, c.ticks+1)
	for _, r := range c.Rises {
		if from, to, ok := r.reach(); ok {
			mark(from, to, c.countedPre)
		}
	}
	c.faultPre = map[string][]int32{}
	for _, f := range c.Faults {
		if c.faultPre[f.Kind] == nil {
			c.faultPre[f.Kind] = make([]int32, c.ticks+1)
		}
		mark(c.Start+int64(f.StartS*1e9), c.Start+int64((f.EndS+faultSettle.Seconds())*1e9), c.faultPre[f.Kind])
	}
	for _, pre := range append([][]int32{c.countedPre}, mapValues(c.faultPre)...) {
		for i := 1; i < len(pre); i++ {
			pre[i] += pre[i-1]
		}
	}
}

func mapValues(m map[string][]int32) (out [][]int32) {
	for _, k := range Kinds {
		if v, ok := m[k]; ok {
			out = append(out, v)
		}
	}
	return out
}

// any reports whether pre marks a tick in [s, e).
func anyIn(pre []int32, s, e int) bool {
	s, e = max(s, 0), min(e, len(pre)-1)
	return s < e && pre[e] > pre[s]
}

// keyOver is one key's worst spans: overall, outside counted fallbacks,
// outside any fault, and per fault kind in effect.
type keyOver struct {
	all, uncounted, outside int64
	byKind                  map[string]int64
	example                 string // the worst uncounted span
	exS, exE                int    // its ticks
}

// scanKey finds key k's over-admitted spans among its checks recs.
func (c *Judge) scanKey(k int, recs []checkRec) keyOver {
	rule := c.Keys.Rules[k/c.Keys.PerAlg()]
	// pre[s*(lagCap+1)+l]: admitted checks sent in tick s answered at most
	// l ticks later.
	pre := make([]int32, c.ticks*(lagCap+1))
	answered := make([]bool, c.ticks)
	for _, r := range recs {
		s, lag := c.tickIndex(r.send), c.tickIndex(r.recv())-c.tickIndex(r.send)
		if r.flags&ckAdmitted == 0 || lag > lagCap || s < 0 || s >= c.ticks {
			continue
		}
		pre[s*(lagCap+1)+lag]++
		answered[min(s+lag, c.ticks-1)] = true
	}
	for s := range c.ticks {
		row := pre[s*(lagCap+1) : (s+1)*(lagCap+1)]
		for l := 1; l < len(row); l++ {
			row[l] += row[l-1]
		}
	}
	ko := keyOver{byKind: map[string]int64{}}
	for e := 1; e < c.ticks; e++ {
		if !answered[e-1] {
			continue // no new answer: no span ending here is worse than one ending earlier
		}
		var admitted int64 // sent from tick s on, answered before tick e
		for d := 1; d <= longSpan && e-d >= 0; d++ {
			s := e - d
			admitted += int64(pre[s*(lagCap+1)+min(d-1, lagCap)])
			if d > shortSpan && d%int(time.Second/scanTick) != 0 {
				continue
			}
			if over := admitted*c.Hits - c.Bound(rule, c.tickTime(s), c.tickTime(e)); over > 0 {
				c.noteSpan(&ko, k, s, e, over, d <= recentSpan)
			}
		}
	}
	if ko.example != "" {
		ko.example += deciders(recs, c.tickTime(ko.exS), c.tickTime(ko.exE))
	}
	return ko
}

// deciders names the nodes that decided the admitted checks of recs sent
// from s on and answered before e: more than one, outside a counted
// fallback, is two nodes deciding one key.
func deciders(recs []checkRec, s, e int64) string {
	var by [256]int
	for _, r := range recs {
		if r.flags&ckAdmitted != 0 && r.send >= s && r.recv() < e {
			by[r.owner]++
		}
	}
	var parts []string
	for o, n := range by {
		if n > 0 {
			name := fmt.Sprintf("node %d", o)
			if o == 0 {
				name = "unknown"
			}
			parts = append(parts, fmt.Sprintf("%s %d", name, n))
		}
	}
	return " (admitted by " + strings.Join(parts, ", ") + ")"
}

// noteSpan records an over-admitted span [s, e) of key k; a recent one
// (at most recentSpan long) marks its end's window as not exact: a longer
// one may only hold an excess admitted long before (recovery).
func (c *Judge) noteSpan(ko *keyOver, k, s, e int, over int64, recent bool) {
	ko.all = max(ko.all, over)
	if recent {
		w := &c.win[c.window(c.tickTime(e)-1)]
		w.over = max(w.over, over)
	}
	if !anyIn(c.countedPre, s, e) && over > ko.uncounted {
		ko.uncounted = over
		ko.example = fmt.Sprintf("%s: %d hits over in [%.1fs, %.1fs)", c.Keys.Names[k], over, c.secs(c.tickTime(s)), c.secs(c.tickTime(e)))
		ko.exS, ko.exE = s, e
	}
	inAny := false
	for kind, pre := range c.faultPre {
		if anyIn(pre, s, e) {
			inAny = true
			ko.byKind[kind] = max(ko.byKind[kind], over)
		}
	}
	if !inAny {
		ko.outside = max(ko.outside, over)
	}
}
