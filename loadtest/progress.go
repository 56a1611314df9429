package main

import (
	"fmt"
	"io"
	"sync"
	"time"
)

// collector gathers the workers' shards: once a second for the progress
// line, and once at the end for the totals.
type collector struct {
	shards []*shard
	start  time.Time

	mu       sync.Mutex // guards what follows; held by progress and finish
	total    *Histogram
	refusals *Histogram // latency of the calls the server shed
	tally    tally
	interval *Histogram
	elapsed  time.Duration // start to finish
}

func newCollector(n int, start time.Time) *collector {
	c := &collector{start: start, total: newHistogram(), refusals: newHistogram(), interval: newHistogram()}
	for range n {
		c.shards = append(c.shards, newShard())
	}
	return c
}

// collect drains every shard into the totals and returns what arrived
// since the last collect.
func (c *collector) collectLocked() (tally, *Histogram) {
	var t tally
	c.interval.Reset()
	for _, s := range c.shards {
		s.drainInto(c.interval, c.refusals, &t)
	}
	c.total.Merge(c.interval)
	c.tally.add(&t)
	return t, c.interval
}

// progress prints a line on w every second until the returned stop is
// called; stop waits for the printer to exit.
func (c *collector) progress(w io.Writer) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		last := c.start
		for {
			select {
			case <-done:
				return
			case now := <-tick.C:
				c.mu.Lock()
				t, h := c.collectLocked()
				fmt.Fprintln(w, progressLine(now.Sub(c.start), now.Sub(last), &t, h))
				c.mu.Unlock()
				last = now
			}
		}
	})
	return func() {
		close(done)
		wg.Wait()
	}
}

// finish collects what the workers recorded last and stops the clock.
func (c *collector) finish() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.collectLocked()
	c.elapsed = time.Since(c.start)
}

func progressLine(at, span time.Duration, t *tally, h *Histogram) string {
	sec := span.Seconds()
	return fmt.Sprintf("%5.1fs %10.0f checks/s %8.0f rpc/s  p50 %s  p99 %s  max %s  refused %d  errors %d",
		at.Seconds(), float64(t.checks)/sec, float64(t.rpcs)/sec,
		fmtLatency(h.Quantile(0.5)), fmtLatency(h.Quantile(0.99)), fmtLatency(h.Max()), t.refused, t.errorCount())
}

// fmtLatency formats nanoseconds as milliseconds with 3 significant-ish
// digits.
func fmtLatency(ns int64) string {
	ms := float64(ns) / 1e6
	switch {
	case ms < 1:
		return fmt.Sprintf("%.3fms", ms)
	case ms < 100:
		return fmt.Sprintf("%.2fms", ms)
	}
	return fmt.Sprintf("%.0fms", ms)
}
