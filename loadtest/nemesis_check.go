package main

import (
	"cmp"
	"fmt"
	"os"
	"slices"
	"time"

	"github.com/shardlimiter/shardlimiter/limit"
)

// The checker of --mode nemesis reads the whole history once the load has
// stopped. Each key's checks are scanned for spans in which more hits were
// admitted than a single perfect limiter allows (nemesis_intervals.go);
// each such span is matched with the faults in effect (from their start
// to faultSettle after their end) and with the node counters that record
// fallback decisions (nemesis_scrape.go): a rise of one within countSlack
// of the span covers it. Per key, the worst span counts, overall and in
// each class. The run is also cut into windows of checkWindow, which say
// when answers were exact again after each fault.
const (
	checkWindow = time.Second
	faultSettle = 5 * time.Second        // a fault stays "in effect" this long after its end
	countSlack  = time.Second            // a counter rise this close to a window covers it
	callSlack   = 2 * time.Second        // a failed call this soon after its node's process fault ends is counted
	exactRun    = 3                      // windows in a row without any fault sign: recovered
	maxExamples = 10                     // uncounted calls and windows listed in the report
	rejoinSlack = 100 * time.Millisecond // a call sent just before its node's fault counts too
)

// windowStat is what happened in one window.
type windowStat struct {
	over, failedCalls, itemErrors int64
	counted                       bool // a counted fallback rose near it
}

func (w *windowStat) exact() bool {
	return w.over == 0 && w.failedCalls == 0 && w.itemErrors == 0 && !w.counted
}

// historyJudge holds the history and the judgement.
type historyJudge struct {
	start, end int64 // Unix ns: the load's start, and the last answer
	ks         *keySpace
	rec        *recorder
	hits       int64
	faults     []fault
	rises      []rise
	win        []windowStat
	ticks      int                // scan ticks in the run (nemesis_intervals.go)
	countedPre []int32            // prefix sums: ticks near a counted fallback
	faultPre   map[string][]int32 // prefix sums: ticks with a fault of the kind in effect
	rep        *nemesisReport
}

// window returns the index of the window holding t (Unix ns).
func (c *historyJudge) window(t int64) int {
	return min(max(int((t-c.start)/int64(checkWindow)), 0), len(c.win)-1)
}

func (c *historyJudge) windowEnd(k int) int64 { return c.start + int64(k+1)*int64(checkWindow) }

// judge fills rep from the history.
func (c *historyJudge) judge() {
	c.end = c.start
	for _, call := range c.rec.calls {
		c.end = max(c.end, call.recv)
	}
	c.win = make([]windowStat, int((c.end-c.start)/int64(checkWindow))+1)
	c.markCounted()
	c.prepareTicks()
	c.judgeCalls()
	for k := range c.ks.names {
		c.judgeKey(k)
	}
	c.recovery()
	if os.Getenv("NEMESIS_DEBUG") != "" {
		for k, w := range c.win {
			fmt.Fprintf(os.Stderr, "window %d: %+v\n", k, w)
		}
	}
}

// markCounted marks the windows near a rise of a counted fallback, and
// sums every counter's rises.
func (c *historyJudge) markCounted() {
	c.rep.CounterRises = map[string]float64{}
	for _, r := range c.rises {
		c.rep.CounterRises[nemesisCounters[r.counter]] += r.by
		if r.counter >= countedFallbacks {
			continue
		}
		for k := c.window(r.from - int64(countSlack)); k <= c.window(r.to+int64(countSlack)); k++ {
			c.win[k].counted = true
		}
	}
}

// judgeCalls counts answered and unanswered calls; an unanswered call is
// counted when its node was under a process fault when it was sent.
func (c *historyJudge) judgeCalls() {
	rep := c.rep
	for _, call := range c.rec.calls {
		rep.Calls++
		if !call.failed {
			rep.AnsweredCalls++
			continue
		}
		rep.UnansweredCalls++
		c.win[c.window(call.recv)].failedCalls++
		if f := c.processFaultOn(int(call.node), call.send); f != nil {
			rep.UnansweredCounted++
			continue
		}
		rep.UnansweredUncounted++
		if len(rep.UncountedCalls) < maxExamples {
			rep.UncountedCalls = append(rep.UncountedCalls, fmt.Sprintf("%.3fs node %d %s after %v",
				c.secs(call.send), call.node, call.kind, time.Duration(call.recv-call.send).Round(time.Millisecond)))
		}
	}
}

// processFaultOn returns a process fault that had node down, stopped or
// restarting at t, or nil.
func (c *historyJudge) processFaultOn(node int, t int64) *fault {
	s := c.secs(t)
	for i := range c.faults {
		f := &c.faults[i]
		if !processFault(f.Kind) || (f.Kind != faultAllStop && !slices.Contains(f.Nodes, node)) {
			continue
		}
		if s >= f.StartS-rejoinSlack.Seconds() && s <= f.EndS+callSlack.Seconds() {
			return f
		}
	}
	return nil
}

func (c *historyJudge) secs(t int64) float64 { return float64(t-c.start) / 1e9 }

// judgeKey counts key k's checks, scans them for over-admitted spans
// (nemesis_intervals.go) and compares them with an exact replay.
func (c *historyJudge) judgeKey(k int) {
	recs := c.rec.checks[k]
	if len(recs) == 0 {
		return
	}
	rule := c.ks.rules[k/c.ks.perAlg()]
	slices.SortFunc(recs, func(a, b checkRec) int { return cmp.Compare(a.send, b.send) })
	first := recs[0].send
	var admitted int64
	at := make([]attempt, len(recs))
	for i, r := range recs {
		at[i] = attempt{send: r.send, recv: r.recv(), hits: c.hits, admitted: r.flags&ckAdmitted != 0}
		switch {
		case r.flags&ckCallFailed != 0:
			at[i].fail = failRPC
		case r.flags&ckItemError != 0:
			at[i].fail = failItem
			c.rep.ItemErrors++
			c.win[c.window(r.recv())].itemErrors++
		}
		c.rep.Checks++
		if at[i].admitted {
			admitted += c.hits
			c.rep.AdmittedHits += c.hits
		} else if at[i].fail == failNone {
			c.rep.RejectedHits += c.hits
		}
	}
	ko := c.scanKey(k, recs)
	c.addKey(k, rule, ko)
	c.rep.BoundHits += bound(rule, first, recs[len(recs)-1].recv())
	exp := expected(rule, at)
	c.rep.ExpectedHits += exp
	c.rep.UnderAdmittedHits += max(exp-admitted, 0)
	if ko.all > 0 && (c.rep.WorstKey == nil || ko.all > c.rep.WorstKey.Over) {
		c.rep.WorstKey = &nemesisKey{Key: c.ks.names[k], Algorithm: rule.Algorithm.String(), Admitted: admitted, Over: ko.all}
	}
}

// addKey adds a key's worst spans to the report.
func (c *historyJudge) addKey(k int, rule limit.Rule, ko keyOver) {
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
func (c *historyJudge) recovery() {
	for i := range c.faults {
		f := &c.faults[i]
		k := c.window(c.start + int64(f.EndS*1e9))
		for ; k+exactRun <= len(c.win); k++ {
			if !slices.ContainsFunc(c.win[k:k+exactRun], func(w windowStat) bool { return !w.exact() }) {
				break
			}
		}
		if k+exactRun > len(c.win) {
			f.Recovery = "not exact again before the end of the run"
			continue
		}
		at := float64(k) * checkWindow.Seconds()
		f.RecoveryS = ptr(max(at-f.EndS, 0))
		f.Recovery = fmt.Sprintf("exact from %.0fs", at)
		var during []string
		for _, g := range c.faults {
			if g.StartS > f.EndS && g.StartS < at {
				during = append(during, fmt.Sprintf("%s at %.1fs", g.Kind, g.StartS))
			}
		}
		if len(during) > 0 {
			f.Recovery += fmt.Sprintf("; faults started meanwhile: %v", during)
		}
	}
}

// nemesisKey is the key furthest over its bound.
type nemesisKey struct {
	Key       string `json:"key"`
	Algorithm string `json:"algorithm"`
	Admitted  int64  `json:"admitted_hits"`
	Over      int64  `json:"over_hits"`
}
