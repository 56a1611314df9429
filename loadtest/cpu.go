package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// cpuMetric is the standard Prometheus process collector's counter of CPU
// seconds (user + system) the server process has used.
const cpuMetric = "process_cpu_seconds_total"

// forwardedMetric counts the checks a node forwarded to their owners
// (shardlimiter's own; other servers have none, and the share forwarded
// is then not reported).
const forwardedMetric = "shardlimiter_peer_forwarded_checks_total"

// scrapeTimeout bounds one /metrics request.
const scrapeTimeout = 3 * time.Second

// cpuSample is the CPU time used so far by this process and by each
// metrics target.
type cpuSample struct {
	at       time.Time
	client   time.Duration
	clientOK bool
	servers  []float64 // seconds, per metrics target
	err      error     // the first target that could not be read
	// forwarded is forwardedMetric per metrics target; fwdOK is false
	// when a target has none.
	forwarded []float64
	fwdOK     bool
}

// sample reads this process's CPU time and every target's cpuMetric.
func sample(ctx context.Context, metrics []string) cpuSample {
	s := cpuSample{at: time.Now(), fwdOK: true}
	s.client, s.clientOK = processCPU()
	for _, addr := range metrics {
		v, err := scrapeCounter(ctx, addr, cpuMetric)
		if err != nil && s.err == nil {
			s.err = err
		}
		s.servers = append(s.servers, v)
		f, err := scrapeCounter(ctx, addr, forwardedMetric)
		s.fwdOK = s.fwdOK && err == nil
		s.forwarded = append(s.forwarded, f)
	}
	return s
}

// cpuDelta is the CPU used between two samples.
type cpuDelta struct {
	wall      time.Duration
	client    time.Duration
	clientOK  bool
	server    float64 // seconds, summed over the targets
	serverN   int     // targets measured; 0 when none or unreadable
	serverErr error
	forwarded float64 // checks forwarded node to node, summed over the targets
	fwdOK     bool    // forwarded was measured
}

// until returns the CPU used from b to a.
func (b cpuSample) until(a cpuSample) cpuDelta {
	d := cpuDelta{wall: a.at.Sub(b.at), client: a.client - b.client, clientOK: b.clientOK && a.clientOK}
	d.serverErr = errors.Join(b.err, a.err)
	if d.serverErr != nil || len(a.servers) != len(b.servers) {
		return d
	}
	for i := range a.servers {
		d.server += a.servers[i] - b.servers[i]
	}
	d.serverN = len(a.servers)
	if a.fwdOK && b.fwdOK && len(a.forwarded) == len(b.forwarded) && len(a.forwarded) > 0 {
		for i := range a.forwarded {
			d.forwarded += a.forwarded[i] - b.forwarded[i]
		}
		d.fwdOK = true
	}
	return d
}

// metricsURL turns a metrics target into the URL of its metrics: host:port
// becomes http://host:port/metrics; a URL is used as given.
func metricsURL(addr string) string {
	if strings.Contains(addr, "://") {
		return addr
	}
	return httpScheme + addr + "/metrics"
}

// scrapeCounter reads the unlabelled counter name from the metrics of
// addr.
func scrapeCounter(ctx context.Context, addr, name string) (float64, error) {
	ctx, cancel := context.WithTimeout(ctx, scrapeTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, metricsURL(addr), nil)
	if err != nil {
		return 0, fmt.Errorf("metrics %s: %w", addr, err)
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		return 0, fmt.Errorf("metrics %s: %w", addr, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("metrics %s: HTTP %s", addr, resp.Status)
	}
	v, err := parseCounter(resp.Body, name)
	if err != nil {
		return 0, fmt.Errorf("metrics %s: %w", addr, err)
	}
	return v, nil
}

// parseCounter returns the value of the unlabelled sample name in the
// Prometheus text exposition format: the line "name value [timestamp]".
// It is the one line this tool needs, so a full parser is not imported.
func parseCounter(r io.Reader, name string) (float64, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), name)
		if !ok || !strings.HasPrefix(rest, " ") {
			continue
		}
		fields := strings.Fields(rest)
		v, err := strconv.ParseFloat(fields[0], 64)
		if err != nil {
			return 0, fmt.Errorf("%s: bad value %q", name, fields[0])
		}
		return v, nil
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, fmt.Errorf("no %s sample", name)
}
