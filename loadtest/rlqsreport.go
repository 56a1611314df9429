package main

import (
	"fmt"
	"io"
	"math"
	"time"
)

// convergeStep is how finely the assignments are sampled to find when
// they converged.
const convergeStep = 100 * time.Millisecond

// analyse turns the instances' records into the report.
func analyse(c *rlqsConfig, sims []*envoySim, targets int, d time.Duration) *rlqsReport {
	n := int(d / time.Second)
	rep := &rlqsReport{Instances: len(sims), Targets: targets, Limit: c.limit, IntervalS: c.interval.Seconds(),
		DurationS: d.Seconds(), Demands: c.demands, ShiftTo: c.shiftTo, Targets1: maxMinShares(c.limit, c.demands)}
	for s := range n {
		total := 0.0
		for _, e := range sims {
			total += e.admittedAt(s)
		}
		rep.PerSecond = append(rep.PerSecond, total/c.limit)
	}
	end := d
	if c.shiftAt > 0 {
		end = c.shiftAt
		rep.ShiftAtS = c.shiftAt.Seconds()
		rep.Targets2 = maxMinShares(c.limit, c.shiftTo)
	}
	conv := convergedFrom(sims, 0, end, c.demands, rep.Targets1)
	rep.ConvergedS = seconds(conv)
	if conv >= 0 {
		rep.Steady = span(c, sims, rep, int(math.Ceil(conv.Seconds())), int(end/time.Second), c.demands, rep.Targets1)
	}
	if c.shiftAt > 0 {
		sc := convergedFrom(sims, c.shiftAt, d, c.shiftTo, rep.Targets2)
		rep.ShiftConvS, rep.ShiftConvR = -1, -1
		if sc >= 0 {
			rep.ShiftConvS = (sc - c.shiftAt).Seconds()
			rep.ShiftConvR = reportsBetween(sims, c.shiftAt, sc)
			w := span(c, sims, rep, int(math.Ceil(sc.Seconds())), n, c.shiftTo, rep.Targets2)
			rep.AfterShift = &w
			for s := int(c.shiftAt / time.Second); s < min(n, int(math.Ceil(sc.Seconds()))+1); s++ {
				rep.ShiftPeak = max(rep.ShiftPeak, rep.PerSecond[s])
			}
		}
	}
	return rep
}

// reportsBetween returns the most reports an instance sent in (from, to].
func reportsBetween(sims []*envoySim, from, to time.Duration) int {
	most := 0
	for _, e := range sims {
		e.mu.Lock()
		n := 0
		for _, at := range e.reports {
			if at > from && at <= to {
				n++
			}
		}
		e.mu.Unlock()
		most = max(most, n)
	}
	return most
}

func seconds(d time.Duration) float64 {
	if d < 0 {
		return -1
	}
	return d.Seconds()
}

func (e *envoySim) admittedAt(s int) float64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	if s < len(e.admitted) {
		return e.admitted[s]
	}
	return 0
}

// convergedFrom returns the offset in [from, to) from which every
// instance's assignment stayed within 10% (or 1 request/s) of its fair
// share, or at least 90% of its demand when it wants less than its share;
// -1 when they never did.
func convergedFrom(sims []*envoySim, from, to time.Duration, demands, shares []float64) time.Duration {
	last := time.Duration(-1) // the last sample not converged
	for at := from; at < to; at += convergeStep {
		for i, e := range sims {
			e.mu.Lock()
			r := e.rateAtTime(at)
			e.mu.Unlock()
			ok := !math.IsNaN(r) && math.Abs(r-shares[i]) <= max(0.1*shares[i], 1)
			if shares[i] >= demands[i] {
				ok = !math.IsNaN(r) && r >= 0.9*demands[i]
			}
			if !ok {
				last = at
				break
			}
		}
	}
	switch {
	case last < 0:
		return from
	case last+convergeStep >= to:
		return -1
	}
	return last + convergeStep
}

// span sums the whole seconds [from, to) of the run.
func span(c *rlqsConfig, sims []*envoySim, rep *rlqsReport, from, to int, demands, shares []float64) window {
	to = min(to, len(rep.PerSecond))
	w := window{FromS: from, ToS: to, SmallSatisfied: true}
	if to <= from {
		return w
	}
	secs := float64(to - from)
	total, want := 0.0, 0.0
	for s := from; s < to; s++ {
		total += rep.PerSecond[s] * c.limit
		w.PeakOverLimit = max(w.PeakOverLimit, rep.PerSecond[s])
	}
	var sum, sumSq float64
	constrained := 0
	for i, e := range sims {
		got := 0.0
		for s := from; s < to; s++ {
			got += e.admittedAt(s)
		}
		got /= secs
		w.PerInstance = append(w.PerInstance, math.Round(got*10)/10)
		want += demands[i]
		if shares[i] < demands[i] {
			sum, sumSq, constrained = sum+got, sumSq+got*got, constrained+1
		} else if got < 0.9*demands[i] {
			w.SmallSatisfied = false
		}
	}
	w.AvgOverLimit = total / secs / c.limit
	w.CapacityUsed = total / secs / min(c.limit, want)
	w.Jain = 1
	if constrained > 0 && sumSq > 0 {
		w.Jain = sum * sum / (float64(constrained) * sumSq)
	}
	return w
}

// writeRLQS prints the report for people.
func writeRLQS(out io.Writer, r *rlqsReport) error {
	fmt.Fprintf(out, "rlqs: %d instances over %d targets, limit %g/s, reports every %gs, %gs\n", r.Instances, r.Targets, r.Limit, r.IntervalS, r.DurationS)
	fmt.Fprintf(out, "demands %v → fair shares %v\n", r.Demands, round1(r.Targets1))
	fmt.Fprintf(out, "converged after %.1fs\n", r.ConvergedS)
	writeWindow(out, "steady", r.Steady)
	if r.ShiftAtS > 0 {
		fmt.Fprintf(out, "shift at %gs to %v → fair shares %v\n", r.ShiftAtS, r.ShiftTo, round1(r.Targets2))
		fmt.Fprintf(out, "re-converged after %.1fs (%d reports); peak admitted ÷ limit meanwhile %.3f\n", r.ShiftConvS, r.ShiftConvR, r.ShiftPeak)
		if r.AfterShift != nil {
			writeWindow(out, "after the shift", *r.AfterShift)
		}
	}
	_, err := fmt.Fprintf(out, "admitted ÷ limit per second: %v\n", round1000(r.PerSecond))
	return err
}

func writeWindow(out io.Writer, name string, w window) {
	fmt.Fprintf(out, "%s (s %d–%d): admitted ÷ limit avg %.3f peak %.3f, capacity used %.1f%%, Jain (constrained) %.4f, small satisfied %v\n  per instance %v\n",
		name, w.FromS, w.ToS, w.AvgOverLimit, w.PeakOverLimit, 100*w.CapacityUsed, w.Jain, w.SmallSatisfied, w.PerInstance)
}

func round1(xs []float64) []float64 {
	out := make([]float64, len(xs))
	for i, x := range xs {
		out[i] = math.Round(x*10) / 10
	}
	return out
}

func round1000(xs []float64) []float64 {
	out := make([]float64, len(xs))
	for i, x := range xs {
		out[i] = math.Round(x*1000) / 1000
	}
	return out
}
