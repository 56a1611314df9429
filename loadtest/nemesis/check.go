package nemesis

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/shardlimiter/shardlimiter/limit"
)

// The checker of --mode nemesis reads the whole history once the load has
// stopped. Each key's checks are scanned for spans in which more hits were
// admitted than a single perfect limiter allows (intervals.go);
// each such span is matched with the faults in effect (from their start
// to faultSettle after their end) and with the node counters that record
// fallback decisions (scrape.go): a rise of one within countSlack
// of the span covers it. Per key, the worst span counts, overall and in
// each class. The run is also cut into windows of checkWindow, which say
// when answers were exact again after each fault: exactRun windows in a
// row (3 s) with no failed call, item error, over-admitted span ending in
// them, nor a counted fallback decided in them (between the two scrapes
// around its counter's rise, scrapeEvery apart).
const (
	checkWindow = 250 * time.Millisecond
	faultSettle = 5 * time.Second        // a fault stays "in effect" this long after its end
	countSlack  = time.Second            // a counter rise this close to a window covers it
	callSlack   = 2 * time.Second        // a failed call this soon after its node's process fault ends is counted
	exactRun    = 12                     // windows in a row without any fault sign (3 s): recovered
	maxExamples = 10                     // uncounted calls and windows listed in the report
	rejoinSlack = 100 * time.Millisecond // a call sent just before its node's fault counts too
)

// windowStat is what happened in one window.
type windowStat struct {
	over, failedCalls, itemErrors int64
	counted                       bool   // a counted fallback rose near it
	counters                      uint16 // which: bit i for Counters[i], the top bit for a logged one
}

// signs says what kept w from being exact, for the recovery's report.
func (w *windowStat) signs() string {
	var out []string
	if w.over > 0 {
		out = append(out, fmt.Sprintf("%d hits over", w.over))
	}
	if w.failedCalls > 0 {
		out = append(out, fmt.Sprintf("%d failed calls", w.failedCalls))
	}
	if w.itemErrors > 0 {
		out = append(out, fmt.Sprintf("%d item errors", w.itemErrors))
	}
	for i, name := range Counters {
		if w.counters&(1<<i) != 0 {
			out = append(out, strings.TrimSuffix(strings.TrimPrefix(name, "shardlimiter_"), "_total"))
		}
	}
	if w.counters&loggedBit != 0 {
		out = append(out, "a logged fallback")
	}
	return strings.Join(out, ", ")
}

// loggedBit is windowStat.counters' bit for a rise read from a log.
const loggedBit = 1 << 15

func (w *windowStat) exact() bool {
	return w.over == 0 && w.failedCalls == 0 && w.itemErrors == 0 && !w.counted
}

// Judge reads a run's history and fills a Report: set its fields, then
// call Run.
type Judge struct {
	Start  int64 // Unix ns: the load's start
	Keys   *KeySpace
	Rec    *Recorder
	Hits   int64 // per check
	Faults []Fault
	Rises  []Rise
	// Bound is the most hits a single perfect limiter of the rule admits
	// with all its decisions in [a, b] (Unix ns).
	Bound func(r limit.Rule, a, b int64) int64
	// Replay is the hits an exact limiter of the rule admits for these
	// checks at their send times (failed ones left out).
	Replay func(r limit.Rule, at []Attempt) int64

	end        int64 // the last answer
	win        []windowStat
	ticks      int                // scan ticks in the run (intervals.go)
	countedPre []int32            // prefix sums: ticks near a counted fallback
	faultPre   map[string][]int32 // prefix sums: ticks with a fault of the kind in effect
	rep        *Report
}

// Attempt is one check for Replay, times in Unix ns.
type Attempt struct {
	Send, Recv, Hits int64
	Admitted, Failed bool
}

// window returns the index of the window holding t (Unix ns).
func (c *Judge) window(t int64) int {
	return min(max(int((t-c.Start)/int64(checkWindow)), 0), len(c.win)-1)
}

// Run judges the history into rep.
func (c *Judge) Run(rep *Report) {
	c.rep = rep
	if rep.OverByAlgorithm == nil {
		rep.OverByAlgorithm, rep.OverByFault = map[string]int64{}, map[string]int64{}
	}
	c.end = c.Start
	for _, call := range c.Rec.calls {
		c.end = max(c.end, call.Recv)
	}
	c.win = make([]windowStat, int((c.end-c.Start)/int64(checkWindow))+1)
	c.markCounted()
	c.prepareTicks()
	c.judgeCalls()
	for k := range c.Keys.Names {
		c.judgeKey(k)
	}
	c.recovery()
	rep.SumRecoveries()
}

// markCounted marks the windows near a rise of a counted fallback, and
// sums every counter's rises.
func (c *Judge) markCounted() {
	c.rep.CounterRises = map[string]float64{}
	for _, r := range c.Rises {
		name := loggedName
		if r.Counter >= 0 {
			name = Counters[r.Counter]
		}
		c.rep.CounterRises[name] += r.By
		// A window with a counted fallback decided in it (between the
		// two samples of the rise) is not exact; countSlack and the
		// longer reach of a given-up handoff are for the spans'
		// attribution (intervals.go), not for recovery.
		if _, _, ok := r.reach(); ok {
			bit := uint16(loggedBit)
			if r.Counter >= 0 && r.Counter < 15 {
				bit = 1 << r.Counter
			}
			for k := c.window(r.From); k <= c.window(r.To); k++ {
				c.win[k].counted = true
				c.win[k].counters |= bit
			}
		}
	}
}

// judgeCalls counts answered and unanswered calls; an unanswered call is
// counted when its node was down, stopped or restarting while it was in
// flight.
func (c *Judge) judgeCalls() {
	rep := c.rep
	for _, call := range c.Rec.calls {
		rep.Calls++
		if !call.Failed {
			rep.AnsweredCalls++
			rep.MaxAnswerMS = max(rep.MaxAnswerMS, float64(call.Recv-call.Send)/1e6)
			continue
		}
		rep.UnansweredCalls++
		c.win[c.window(call.Recv)].failedCalls++
		if f := c.processFaultOn(int(call.Node), call.Send, call.Recv); f != nil {
			rep.UnansweredCounted++
			continue
		}
		rep.UnansweredUncounted++
		if len(rep.UncountedCalls) < maxExamples {
			rep.UncountedCalls = append(rep.UncountedCalls, fmt.Sprintf("%.3fs node %d %s after %v",
				c.secs(call.Send), call.Node, call.Kind, time.Duration(call.Recv-call.Send).Round(time.Millisecond)))
		}
	}
}

// processFaultOn returns a process fault that had node down, stopped or
// restarting while a call to it was in flight (from send to recv), or nil.
func (c *Judge) processFaultOn(node int, send, recv int64) *Fault {
	from, to := c.secs(send), c.secs(recv)
	for i := range c.Faults {
		f := &c.Faults[i]
		if !ProcessFault(f.Kind) || (f.Kind != AllStop && !slices.Contains(f.Nodes, node)) {
			continue
		}
		if to >= f.StartS-rejoinSlack.Seconds() && from <= f.EndS+callSlack.Seconds() {
			return f
		}
	}
	return nil
}

func (c *Judge) secs(t int64) float64 { return float64(t-c.Start) / 1e9 }

// judgeKey counts key k's checks, scans them for over-admitted spans
// (intervals.go) and compares them with an exact replay.
func (c *Judge) judgeKey(k int) {
	recs := c.Rec.checks[k]
	if len(recs) == 0 {
		return
	}
	rule := c.Keys.Rules[k/c.Keys.PerAlg()]
	slices.SortFunc(recs, func(a, b checkRec) int { return cmp.Compare(a.send, b.send) })
	first := recs[0].send
	var admitted int64
	at := make([]Attempt, len(recs))
	for i, r := range recs {
		at[i] = Attempt{Send: r.send, Recv: r.recv(), Hits: c.Hits, Admitted: r.flags&ckAdmitted != 0, Failed: r.flags&(ckCallFailed|ckItemError) != 0}
		if r.flags&ckItemError != 0 {
			c.rep.ItemErrors++
			c.win[c.window(r.recv())].itemErrors++
		}
		c.rep.Checks++
		if at[i].Admitted {
			admitted += c.Hits
			c.rep.AdmittedHits += c.Hits
		} else if !at[i].Failed {
			c.rep.RejectedHits += c.Hits
		}
	}
	ko := c.scanKey(k, recs)
	c.addKey(k, rule, ko)
	c.rep.BoundHits += c.Bound(rule, first, recs[len(recs)-1].recv())
	exp := c.Replay(rule, at)
	c.rep.ExpectedHits += exp
	c.rep.UnderAdmittedHits += max(exp-admitted, 0)
	if ko.all > 0 && (c.rep.WorstKey == nil || ko.all > c.rep.WorstKey.Over) {
		c.rep.WorstKey = &Key{Key: c.Keys.Names[k], Algorithm: rule.Algorithm.String(), Admitted: admitted, Over: ko.all}
	}
}

// addKey adds a key's worst spans to the report.
func (c *Judge) addKey(k int, rule limit.Rule, ko keyOver) {
	rep := c.rep
	rep.OverAdmittedHits += ko.all
	rep.OverByAlgorithm[rule.Algorithm.String()] += ko.all
	rep.OverUncounted += ko.uncounted
	rep.OverCounted += ko.all - ko.uncounted
	rep.OverOutsideFaults += ko.outside
	for kind, n := range ko.byKind {
		rep.OverByFault[kind] += n
	}
	if ko.example != "" && len(rep.UncountedKeys) < maxExamples {
		rep.UncountedKeys = append(rep.UncountedKeys, ko.example)
	}
}

// recovery finds, for each fault, how long after its end the answers were
// exact again: the first window from its end that starts exactRun windows
// without over-admission, failed calls, item errors or counted fallbacks.
func (c *Judge) recovery() {
	for i := range c.Faults {
		f := &c.Faults[i]
		k := c.window(c.Start + int64(f.EndS*1e9))
		for ; k+exactRun <= len(c.win); k++ {
			if !slices.ContainsFunc(c.win[k:k+exactRun], func(w windowStat) bool { return !w.exact() }) {
				break
			}
		}
		if k+exactRun > len(c.win) {
			later := 0
			for _, g := range c.Faults {
				if g.StartS > f.EndS {
					later++
				}
			}
			f.Recovery = fmt.Sprintf("never %v in a row without failed calls, item errors, counted fallbacks or over-admission before the end of the run (%d faults started after it)", exactRun*checkWindow, later)
			if last := c.lastInexact(); last >= 0 {
				f.Recovery += "; the last window not exact, " + c.windowText(last)
			}
			continue
		}
		at := float64(k) * checkWindow.Seconds()
		f.RecoveryS = new(float64)
		*f.RecoveryS = max(at-f.EndS, 0)
		f.Recovery = fmt.Sprintf("exact from %.2fs", at)
		if first := c.window(c.Start + int64(f.EndS*1e9)); k > first {
			f.Recovery += "; the last window not exact, " + c.windowText(k-1)
		}
		var during []string
		for _, g := range c.Faults {
			if g.StartS > f.EndS && g.StartS < at {
				during = append(during, fmt.Sprintf("%s at %.1fs", g.Kind, g.StartS))
			}
		}
		if len(during) > 0 {
			f.Recovery += fmt.Sprintf("; faults started meanwhile: %v", during)
		}
	}
}

// windowText names window k and what kept it from being exact.
func (c *Judge) windowText(k int) string {
	w := checkWindow.Seconds()
	return fmt.Sprintf("[%.2fs, %.2fs): %s", float64(k)*w, float64(k+1)*w, c.win[k].signs())
}

// lastInexact returns the last window that is not exact, -1 when none.
func (c *Judge) lastInexact() int {
	for k := len(c.win) - 1; k >= 0; k-- {
		if !c.win[k].exact() {
			return k
		}
	}
	return -1
}

// Key is the key furthest over its bound.
type Key struct {
	Key       string `json:"key"`
	Algorithm string `json:"algorithm"`
	Admitted  int64  `json:"admitted_hits"`
	Over      int64  `json:"over_hits"`
}
