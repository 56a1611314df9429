package main

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

// The node counters the nemesis checker reads. The first four record the
// decisions README.md ("When the cluster changes") allows over the bound:
// a window in which one of them rose is covered by a counted fallback.
var nemesisCounters = []string{
	"shardlimiter_peer_fallback_decisions_total",
	"shardlimiter_peer_standin_decisions_total",
	"shardlimiter_handoff_incomplete_total",
	"shardlimiter_handoff_replica_fallbacks_total",
	"shardlimiter_snapshot_write_errors_total",
	"shardlimiter_snapshot_load_errors_total",
}

const countedFallbacks = 4 // the first four of nemesisCounters

// scrapeEvery is the scraper's period.
const scrapeEvery = 500 * time.Millisecond

// scrapeSample is one scrape of one node process.
type scrapeSample struct {
	at   int64 // Unix ns
	pid  int
	vals []float64 // by nemesisCounters
}

// scraper samples every node's counters and peak RSS.
type scraper struct {
	mu      sync.Mutex
	samples [][]scrapeSample // per node (0-based)
	hwm     []int64          // per node: the largest VmHWM seen, bytes
	hwmPID  []int
}

func newScraper(nodes int) *scraper {
	return &scraper{samples: make([][]scrapeSample, nodes), hwm: make([]int64, nodes), hwmPID: make([]int, nodes)}
}

// run scrapes the nodes nodes() returns (nil where one is down) every
// scrapeEvery until ctx ends.
func (s *scraper) run(ctx context.Context, nodes func() []*localNode) {
	tick := time.NewTicker(scrapeEvery)
	defer tick.Stop()
	for {
		for i, nd := range nodes() {
			if nd != nil {
				s.scrape(ctx, i, nd)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// scrape takes one sample of node i; a node that does not answer (stopped,
// cut off) gives none, but its peak RSS is still read.
func (s *scraper) scrape(ctx context.Context, i int, nd *localNode) {
	pid := nd.cmd.Process.Pid
	s.peakRSS(i, pid)
	rctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(rctx, http.MethodGet, httpScheme+nd.http+"/metrics", nil)
	if err != nil {
		return
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		return
	}
	defer resp.Body.Close()
	vals, ok := parseCounters(resp.Body)
	if !ok {
		return
	}
	s.mu.Lock()
	s.samples[i] = append(s.samples[i], scrapeSample{at: time.Now().UnixNano(), pid: pid, vals: vals})
	s.mu.Unlock()
}

// peakRSS reads process pid's VmHWM and keeps node i's largest.
func (s *scraper) peakRSS(i, pid int) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			f := strings.Fields(rest)
			if kb, err := strconv.ParseInt(f[0], 10, 64); err == nil && len(f) == 2 && f[1] == "kB" {
				s.mu.Lock()
				if kb*1024 > s.hwm[i] {
					s.hwm[i], s.hwmPID[i] = kb*1024, pid
				}
				s.mu.Unlock()
			}
		}
	}
}

// parseCounters sums each of nemesisCounters over its labels in a
// Prometheus text exposition.
func parseCounters(r io.Reader) ([]float64, bool) {
	vals := make([]float64, len(nemesisCounters))
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	seen := false
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "shardlimiter_") {
			continue
		}
		seen = true
		for k, name := range nemesisCounters {
			rest, ok := strings.CutPrefix(line, name)
			if !ok || rest == "" || (rest[0] != ' ' && rest[0] != '{') {
				continue
			}
			if v, err := strconv.ParseFloat(rest[strings.LastIndexByte(rest, ' ')+1:], 64); err == nil {
				vals[k] += v
			}
		}
	}
	return vals, seen && sc.Err() == nil
}

// newProcessSpan bounds how far back the first sample of a restarted node
// dates its counts: its start and first scrape take less.
const newProcessSpan = 5 * time.Second

// rise is one interval in which a node's counter rose.
type rise struct {
	from, to int64 // Unix ns: the samples around the rise
	counter  int   // index in nemesisCounters
	by       float64
}

// rises lists every rise of every counter between consecutive samples of
// one process; a new process's first sample counts from zero, from the
// previous sample of its node.
func (s *scraper) rises() []rise {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []rise
	for _, ss := range s.samples {
		for j, cur := range ss {
			prev := scrapeSample{vals: make([]float64, len(cur.vals))}
			from := cur.at - int64(scrapeEvery)
			if j > 0 {
				from = ss[j-1].at
				if ss[j-1].pid == cur.pid {
					prev = ss[j-1]
				} else {
					from = max(from, cur.at-int64(newProcessSpan))
				}
			}
			for k := range cur.vals {
				if d := cur.vals[k] - prev.vals[k]; d > 0 {
					out = append(out, rise{from: from, to: cur.at, counter: k, by: d})
				}
			}
		}
	}
	return out
}
