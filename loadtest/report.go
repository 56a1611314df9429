package main

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"runtime"
	"slices"
	"strings"

	"github.com/shardlimiter/shardlimiter/limit"
)

// result is the report of one measurement; --json writes it as is.
type result struct {
	Run string `json:"run"` // "cluster" or "calibration"
	// CalibrationServer says where the calibration server ran: "in-process"
	// (its CPU is in the client's) or "process" (its own, measured as a node's).
	CalibrationServer string   `json:"calibration_server,omitempty"`
	Mode              string   `json:"mode"`
	Targets           []string `json:"targets"`
	Spread            string   `json:"spread"` // "round-robin" or "entry-one"
	Loop              string   `json:"loop"`   // "closed", "open" or "paced" (accuracy)
	Algorithm         string   `json:"algorithm"`
	Dist              string   `json:"dist"`
	Keys              int      `json:"keys"`
	Batch             int      `json:"batch"`
	Concurrency       int      `json:"concurrency"`
	Conns             int      `json:"conns_per_target"`
	Limit             int64    `json:"limit"`
	PeriodMS          int64    `json:"period_ms"`
	Hits              int64    `json:"hits"`
	DurationS         float64  `json:"duration_s"` // measured, start to last answer

	RPCs            int64            `json:"rpcs"`
	Checks          int64            `json:"checks"` // answered
	Admitted        int64            `json:"admitted"`
	Rejected        int64            `json:"rejected"`
	ChecksPerSecond float64          `json:"checks_per_second"`
	RPCsPerSecond   float64          `json:"rpcs_per_second"`
	LatencyMS       latencyMS        `json:"latency_ms"`
	LatencyFrom     string           `json:"latency_from"` // "send" or "schedule"
	Errors          map[string]int64 `json:"errors"`
	// Refused counts the calls the server shed (RESOURCE_EXHAUSTED with a
	// retry delay): answered at once, nothing decided; not errors, and
	// not in Checks, LatencyMS or RPCs per second's answered share.
	Refused          int64      `json:"refused_calls"`
	RefusalLatencyMS *latencyMS `json:"refusal_latency_ms,omitempty"`
	Abandoned        int64      `json:"abandoned_calls"` // cut off by the drain deadline or Ctrl-C

	ClientCPUMicrosPerCheck *float64 `json:"client_cpu_us_per_check,omitempty"`
	ClientCPUCores          *float64 `json:"client_cpu_cores,omitempty"`
	ServerCPUMicrosPerCheck *float64 `json:"server_cpu_us_per_check,omitempty"`
	ServerCPUCores          *float64 `json:"server_cpu_cores,omitempty"`
	// ForwardedShare is the checks the nodes forwarded to their owners,
	// per check answered (shardlimiter's metrics targets only).
	ForwardedShare *float64       `json:"forwarded_share,omitempty"`
	OpenLoop       *openLoopStats `json:"open_loop,omitempty"`

	OverAdmittedPct  *float64       `json:"over_admitted_pct,omitempty"`
	UnderAdmittedPct *float64       `json:"under_admitted_pct,omitempty"`
	Accuracy         []*algAccuracy `json:"accuracy,omitempty"`
	Pacing           *pacingStats   `json:"pacing,omitempty"`

	// Churn is the --churn schedule, applied to a fresh cluster of Nodes
	// nodes per algorithm (each algorithm's record says what happened).
	Churn       string `json:"churn,omitempty"`
	Nodes       int    `json:"local_nodes,omitempty"`
	ChurnFailed bool   `json:"churn_failed,omitempty"`

	Calibration    *result  `json:"calibration,omitempty"`
	RatioToCeiling *float64 `json:"ratio_to_ceiling,omitempty"`
	Notes          []string `json:"notes,omitempty"`
	Interrupted    bool     `json:"interrupted,omitempty"`
}

// latencyMS holds latency percentiles in milliseconds.
type latencyMS struct {
	P50  float64 `json:"p50"`
	P90  float64 `json:"p90"`
	P99  float64 `json:"p99"`
	P999 float64 `json:"p999"`
	Max  float64 `json:"max"`
	Mean float64 `json:"mean"`
}

// openLoopStats says whether the schedule was kept.
type openLoopStats struct {
	TargetChecksPerSecond float64 `json:"target_checks_per_second"`
	Scheduled             int64   `json:"scheduled_calls"`
	Unsent                int64   `json:"unsent_calls"` // due before the end, never sent
	Late                  int64   `json:"late_sends"`   // sent > 1 ms after due
	LateWakeups           int64   `json:"late_wakeups"` // of which a worker woke > 1 ms late: client CPU
	MaxLagMS              float64 `json:"max_lag_ms"`
	FellBehind            bool    `json:"fell_behind"`
}

func latencies(h *Histogram) latencyMS {
	ms := func(ns int64) float64 { return float64(ns) / 1e6 }
	return latencyMS{
		P50: ms(h.Quantile(0.5)), P90: ms(h.Quantile(0.9)), P99: ms(h.Quantile(0.99)),
		P999: ms(h.Quantile(0.999)), Max: ms(h.Max()), Mean: h.Mean() / 1e6,
	}
}

// newResult builds the report of a run from its collector and CPU use.
func newResult(cfg *config, rule limit.Rule, targets []string, col *collector, cpu cpuDelta) *result {
	r := &result{
		Run: "cluster", Mode: cfg.mode, Spread: "round-robin", Loop: "closed", LatencyFrom: "send",
		Algorithm: rule.Algorithm.String(), Dist: cfg.dist, Keys: cfg.keys, Batch: cfg.batch,
		Concurrency: cfg.concurrency, Conns: cfg.conns, Limit: rule.Limit,
		PeriodMS: rule.Period.Milliseconds(), Hits: cfg.hits, Targets: targets,
	}
	if cfg.entryOne {
		r.Spread = "entry-one"
	}
	r.setCounts(col)
	r.setCPU(cpu)
	if cfg.mode == modeThroughput && cfg.rate == 0 {
		r.note("closed loop: latency is send → answer and excludes queueing in the tool; use --rate for latency under a fixed offered load")
	}
	return r
}

func (r *result) setCounts(col *collector) {
	t := &col.tally
	r.DurationS = col.elapsed.Seconds()
	r.RPCs, r.Checks, r.Admitted, r.Rejected, r.Abandoned = t.rpcs, t.checks, t.admitted, t.rejected, t.abandoned
	if r.DurationS > 0 {
		r.ChecksPerSecond = float64(t.checks) / r.DurationS
		r.RPCsPerSecond = float64(t.rpcs) / r.DurationS
	}
	r.LatencyMS = latencies(col.total)
	r.Refused = t.refused
	if t.refused > 0 {
		l := latencies(col.refusals)
		r.RefusalLatencyMS = &l
	}
	r.Errors = map[string]int64{}
	for k, v := range t.errors {
		r.Errors[k] = v
	}
}

func (r *result) setCPU(cpu cpuDelta) {
	wall := cpu.wall.Seconds()
	if cpu.clientOK && r.Checks > 0 && wall > 0 {
		r.ClientCPUMicrosPerCheck = ptr(cpu.client.Seconds() * 1e6 / float64(r.Checks))
		r.ClientCPUCores = ptr(cpu.client.Seconds() / wall)
		if *r.ClientCPUCores > 0.75*float64(runtime.NumCPU()) {
			r.note(fmt.Sprintf("the tool used %.1f of %d cores: it may be the bottleneck", *r.ClientCPUCores, runtime.NumCPU()))
		}
	}
	switch {
	case cpu.serverErr != nil:
		r.note("server CPU not measured: " + cpu.serverErr.Error())
	case cpu.serverN > 0 && r.Checks > 0 && wall > 0:
		r.ServerCPUMicrosPerCheck = ptr(cpu.server * 1e6 / float64(r.Checks))
		r.ServerCPUCores = ptr(cpu.server / wall)
	}
	if cpu.fwdOK && r.Checks > 0 {
		r.ForwardedShare = ptr(cpu.forwarded / float64(r.Checks))
	}
}

// setOpenLoop records how well an open-loop schedule was kept, and why
// not: calls that found every worker busy were queued by slow answers
// (the latency from the schedule includes that wait); workers that woke
// late were starved of CPU on this machine.
func (r *result) setOpenLoop(rate float64, scheduled int64, col *collector) {
	t := &col.tally
	r.Loop, r.LatencyFrom = "open", "schedule"
	ol := &openLoopStats{
		TargetChecksPerSecond: rate, Scheduled: scheduled, Late: t.late, LateWakeups: t.lateWakeups,
		Unsent:   max(scheduled-t.rpcs-t.abandoned, 0),
		MaxLagMS: float64(t.maxLag) / 1e6,
	}
	significant := func(n int64) bool { return float64(n) > 0.01*float64(scheduled) }
	ol.FellBehind = ol.Unsent > 0 || significant(ol.Late)
	r.OpenLoop = ol
	if !ol.FellBehind {
		return
	}
	r.note(fmt.Sprintf("open loop fell behind: %d of %d calls left more than 1 ms late (max %.1f ms), %d never left; latency counts from the schedule, so it includes that delay",
		ol.Late, scheduled, ol.MaxLagMS, ol.Unsent))
	if significant(ol.LateWakeups) {
		r.note(fmt.Sprintf("%d sends were late because the tool woke late: this machine's CPU, not only the server, limits the offered rate", ol.LateWakeups))
	}
	if significant(ol.Late - ol.LateWakeups) {
		r.note(fmt.Sprintf("%d calls fell due while all %d workers waited for answers: raise --concurrency to keep offering the rate", ol.Late-ol.LateWakeups, r.Concurrency))
	}
}

// attachCalibration nests the ceiling run and the ratio to it.
func (r *result) attachCalibration(cal *result) {
	if cal == nil {
		return
	}
	r.Calibration = cal
	if cal.ChecksPerSecond > 0 && r.Mode == modeThroughput {
		r.RatioToCeiling = ptr(r.ChecksPerSecond / cal.ChecksPerSecond)
	}
}

func (r *result) note(s string) { r.Notes = append(r.Notes, s) }

func ptr(v float64) *float64 { return &v }

func writeJSON(w io.Writer, r *result) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// writeSummary writes the human report.
func writeSummary(w io.Writer, r *result) error {
	var b strings.Builder
	if r.Calibration != nil {
		summarize(&b, r.Calibration)
		b.WriteString("\n")
	}
	summarize(&b, r)
	_, err := io.WriteString(w, b.String())
	return err
}

func summarize(b *strings.Builder, r *result) {
	p := func(format string, a ...any) { fmt.Fprintf(b, format+"\n", a...) }
	if r.Run == "calibration" {
		where := "in-process"
		if r.CalibrationServer == calibrationProcess {
			where = "separate-process"
		}
		p("== calibration: %s gRPC server that admits everything (transport ceiling of this machine)", where)
	} else {
		p("== %s, %s loop, %s over %d target(s): %s", r.Mode, r.Loop, r.Spread, len(r.Targets), strings.Join(r.Targets, " "))
	}
	if r.Mode == modeThroughput {
		p("load        %d workers × batch %d, %d conn(s)/target, %.1fs; %s limit %d per %dms, hits %d; %d keys %s",
			r.Concurrency, r.Batch, r.Conns, r.DurationS, r.Algorithm, r.Limit, r.PeriodMS, r.Hits, r.Keys, r.Dist)
	}
	p("checks      %d answered, %.0f checks/s (admitted %d, rejected %d)", r.Checks, r.ChecksPerSecond, r.Admitted, r.Rejected)
	p("calls       %d, %.0f rpc/s", r.RPCs, r.RPCsPerSecond)
	l := r.LatencyMS
	p("latency     p50 %.3fms  p90 %.3fms  p99 %.3fms  p99.9 %.3fms  max %.3fms  (from %s)", l.P50, l.P90, l.P99, l.P999, l.Max, r.LatencyFrom)
	if l := r.RefusalLatencyMS; l != nil {
		p("refused     %d calls shed by the server (RESOURCE_EXHAUSTED), %.1f%% of calls; answered in p50 %.3fms  p99 %.3fms  max %.3fms",
			r.Refused, 100*float64(r.Refused)/float64(max(r.RPCs, 1)), l.P50, l.P99, l.Max)
	}
	p("errors      %s", fmtErrors(r.Errors, r.Abandoned))
	if r.ClientCPUMicrosPerCheck != nil && r.Mode == modeThroughput {
		p("client CPU  %.3f µs/check (%.2f cores)", *r.ClientCPUMicrosPerCheck, *r.ClientCPUCores)
	}
	if r.ServerCPUMicrosPerCheck != nil && r.Mode == modeThroughput {
		p("server CPU  %.3f µs/check (%.2f cores, all servers)", *r.ServerCPUMicrosPerCheck, *r.ServerCPUCores)
	}
	if r.ForwardedShare != nil {
		p("forwarded   %.1f%% of checks, node to node", 100**r.ForwardedShare)
	}
	if ol := r.OpenLoop; ol != nil {
		p("schedule    %.0f checks/s offered: %d calls due, %d late >1ms (%d woke late), %d never sent, max lag %.2fms",
			ol.TargetChecksPerSecond, ol.Scheduled, ol.Late, ol.LateWakeups, ol.Unsent, ol.MaxLagMS)
	}
	if r.RatioToCeiling != nil {
		p("ceiling     %.0f checks/s %s → this run is %.2f× the transport ceiling", r.Calibration.ChecksPerSecond, r.Calibration.CalibrationServer, *r.RatioToCeiling)
	}
	if len(r.Accuracy) > 0 {
		summarizeAccuracy(b, r)
	}
	for _, n := range r.Notes {
		p("note        %s", n)
	}
	if r.Interrupted {
		p("INTERRUPTED: partial run")
	}
}

func fmtErrors(errs map[string]int64, abandoned int64) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(errs)) {
		parts = append(parts, fmt.Sprintf("%s=%d", k, errs[k]))
	}
	if abandoned > 0 {
		parts = append(parts, fmt.Sprintf("abandoned=%d", abandoned))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, " ")
}
