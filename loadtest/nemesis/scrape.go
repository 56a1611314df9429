package nemesis

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// The node counters the nemesis checker reads. The first four record the
// decisions README.md ("When the cluster changes") allows over the bound:
// a window in which one of them rose is covered by a counted fallback.
var Counters = []string{
	"shardlimiter_peer_fallback_decisions_total",
	"shardlimiter_peer_standin_decisions_total",
	"shardlimiter_handoff_incomplete_total",
	"shardlimiter_handoff_replica_fallbacks_total",
	"shardlimiter_snapshot_write_errors_total",
	"shardlimiter_snapshot_load_errors_total",
}

// LoggedFallback is the Counter of a rise read from a node's log rather
// than its metrics: a warning of a forward that failed (its checks went to
// the stand-in or the fail policy) or of a handoff given up. A node that
// exits (SIGTERM, SIGKILL) takes the counts since its last scrape along;
// its log keeps them. It counts as a counted fallback.
const (
	LoggedFallback = -1 // a forward failed: stand-in or fail policy
	LoggedHandoff  = -2 // a pull or push failed, a leave gave up its handoff
)

// loggedName names the logged rises in Report.CounterRises.
const loggedName = "logged fallback and handoff warnings"

// handoffReach is how long after a handoff given up (or taken from a
// replica) its excess may show: the keys of the partition admit again, up
// to what their old owner had counted, whenever they are next decided,
// which for a key decided every few seconds is within this.
const handoffReach = 10 * time.Second

// reach returns the span a counted rise covers: countSlack around a
// fallback decision, from countSlack before to handoffReach after a
// handoff given up; counted reports whether it covers anything.
func (r Rise) reach() (from, to int64, counted bool) {
	switch r.Counter {
	case 2, 3, LoggedHandoff: // handoff_incomplete, handoff_replica_fallbacks
		return r.From - int64(countSlack), r.To + int64(handoffReach), true
	case 0, 1, LoggedFallback: // fallback, stand-in decisions
		return r.From - int64(countSlack), r.To + int64(countSlack), true
	}
	return 0, 0, false
}

// scrapeEvery is the Scraper's period.
const scrapeEvery = 250 * time.Millisecond

// scrapeSample is one scrape of one node process.
type scrapeSample struct {
	at   int64 // Unix ns
	pid  int
	vals []float64 // by Counters
}

// Scraper samples every node's counters and peak RSS.
type Scraper struct {
	client *http.Client
	scheme string // "http://" or "https://"

	mu      sync.Mutex
	samples [][]scrapeSample // per node (0-based)
	hwm     []int64          // per node: the largest VmHWM seen, bytes
}

// Target is a node process to scrape: its HTTP address and process id;
// a zero PID is a node that is down.
type Target struct {
	HTTP string
	PID  int
}

// NewScraper returns a scraper of nodes nodes reached with client.
func NewScraper(nodes int, client *http.Client, scheme string) *Scraper {
	return &Scraper{client: client, scheme: scheme, samples: make([][]scrapeSample, nodes), hwm: make([]int64, nodes)}
}

// Run scrapes the nodes targets returns every scrapeEvery until ctx
// ends.
func (s *Scraper) Run(ctx context.Context, targets func() []Target) {
	tick := time.NewTicker(scrapeEvery)
	defer tick.Stop()
	for {
		for i, t := range targets() {
			if t.PID != 0 {
				s.scrape(ctx, i, t)
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
func (s *Scraper) scrape(ctx context.Context, i int, t Target) {
	s.PeakRSS(i, t.PID)
	rctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(rctx, http.MethodGet, s.scheme+t.HTTP+"/metrics", nil)
	if err != nil {
		return
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return
	}
	defer resp.Body.Close()
	vals, ok := ParseCounters(resp.Body)
	if !ok {
		return
	}
	s.mu.Lock()
	s.samples[i] = append(s.samples[i], scrapeSample{at: time.Now().UnixNano(), pid: t.PID, vals: vals})
	s.mu.Unlock()
}

// PeakRSSes returns each node's largest VmHWM seen, in bytes.
func (s *Scraper) PeakRSSes() []int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.hwm)
}

// PeakRSS reads process pid's VmHWM and keeps node i's largest; call it
// also just before the process is killed.
func (s *Scraper) PeakRSS(i, pid int) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			f := strings.Fields(rest)
			if kb, err := strconv.ParseInt(f[0], 10, 64); err == nil && len(f) == 2 && f[1] == "kB" {
				s.mu.Lock()
				s.hwm[i] = max(s.hwm[i], kb*1024)
				s.mu.Unlock()
			}
		}
	}
}

// ParseCounters sums each of Counters over its labels in a
// Prometheus text exposition.
func ParseCounters(r io.Reader) ([]float64, bool) {
	vals := make([]float64, len(Counters))
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	seen := false
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "shardlimiter_") {
			continue
		}
		seen = true
		for k, name := range Counters {
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

// Rise is one interval in which a node's counter rose.
type Rise struct {
	From, To int64 // Unix ns: the samples around the rise
	Counter  int   // index in Counters
	By       float64
}

// Rises lists every rise of every counter between consecutive samples of
// one process; a new process's first sample counts from zero, from the
// previous sample of its node.
func (s *Scraper) Rises() []Rise {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Rise
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
					out = append(out, Rise{From: from, To: cur.at, Counter: k, By: d})
				}
			}
		}
	}
	return out
}
