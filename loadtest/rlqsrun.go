package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"time"

	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// rlqsReport is the report of --api rlqs.
type rlqsReport struct {
	Instances   int       `json:"instances"`
	Targets     int       `json:"targets"`
	Limit       float64   `json:"limit_per_second"`
	IntervalS   float64   `json:"interval_s"`
	DurationS   float64   `json:"duration_s"`
	Demands     []float64 `json:"demands"`
	ShiftAtS    float64   `json:"shift_at_s,omitempty"`
	ShiftTo     []float64 `json:"shift_to,omitempty"`
	Targets1    []float64 `json:"fair_shares"`                       // max-min fair shares of Demands
	Targets2    []float64 `json:"fair_shares_after,omitempty"`       // … of ShiftTo
	PerSecond   []float64 `json:"admitted_over_limit"`               // admitted ÷ limit, each second of the run
	Steady      window    `json:"steady"`                            // from the first convergence to the shift (or the end)
	AfterShift  *window   `json:"after_shift,omitempty"`             // from the convergence after the shift to the end
	ConvergedS  float64   `json:"converged_s"`                       // from the start; -1: never
	ShiftConvS  float64   `json:"shift_converged_s,omitempty"`       // from the shift; -1: never
	ShiftConvR  int       `json:"shift_converged_reports,omitempty"` // the most reports an instance sent after the shift until convergence
	ShiftPeak   float64   `json:"shift_peak_over_limit,omitempty"`   // the highest second from the shift to its convergence
	StreamError string    `json:"stream_error,omitempty"`            // the first stream that failed (the instance opened another)
	Reconnects  int       `json:"reconnects,omitempty"`              // streams opened again, all instances
}

// window sums the seconds of a span of the run.
type window struct {
	FromS, ToS     int
	AvgOverLimit   float64   `json:"avg_admitted_over_limit"`
	PeakOverLimit  float64   `json:"peak_admitted_over_limit"`
	CapacityUsed   float64   `json:"capacity_used"` // admitted ÷ min(limit, Σ demand)
	Jain           float64   `json:"jain_constrained"`
	PerInstance    []float64 `json:"admitted_per_instance"`
	SmallSatisfied bool      `json:"small_satisfied"` // every unconstrained instance got ≥ 90% of its demand
}

// executeRLQS runs --api rlqs and writes its report.
func executeRLQS(ctx context.Context, cfg *config, stdout, stderr io.Writer) int {
	defer httpClient.CloseIdleConnections()
	targets := cfg.targets
	if cfg.local > 0 {
		cl, cleanup, err := startRLQSCluster(ctx, cfg, stderr)
		if err != nil {
			fmt.Fprintf(stderr, "loadtest: local cluster: %v\n", err)
			return exitFail
		}
		defer cleanup()
		targets = cl.grpcAddrs()
	}
	rep, err := runRLQS(ctx, &cfg.rlqs, targets, cfg.duration)
	if err != nil {
		fmt.Fprintf(stderr, "loadtest: %v\n", err)
		return exitFail
	}
	if cfg.json {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		err = enc.Encode(rep)
	} else {
		err = writeRLQS(stdout, rep)
	}
	if err == nil && rep.StreamError != "" {
		err = fmt.Errorf("a stream failed: %s", rep.StreamError)
	}
	if err != nil {
		fmt.Fprintf(stderr, "loadtest: %v\n", err)
		return exitFail
	}
	return exitOK
}

// startRLQSCluster starts the --local cluster with rules that limit the
// bucket to --rlqs-limit per second and the report interval.
func startRLQSCluster(ctx context.Context, cfg *config, stderr io.Writer) (*localCluster, func(), error) {
	bin, cleanupBin, err := serverBinary(ctx, cfg.serverBin, progressWriter(cfg, stderr))
	if err != nil {
		return nil, nil, err
	}
	dir, err := os.MkdirTemp("", "loadtest-rlqs-")
	if err != nil {
		cleanupBin()
		return nil, nil, err
	}
	rules := fmt.Sprintf("domain: %s\nrlqs:\n  default: allow\n  buckets:\n    - name: per_tenant\n      entries: [{key: tenant}]\n      rate_limit: {unit: second, requests_per_unit: %d}\n",
		cfg.rlqs.domain, int64(cfg.rlqs.limit))
	path := filepath.Join(dir, "rules.yaml")
	if err := os.WriteFile(path, []byte(rules), 0o600); err != nil {
		os.RemoveAll(dir)
		cleanupBin()
		return nil, nil, err
	}
	flags := append([]string{"--config=" + path, "--rlqs-report-interval=" + cfg.rlqs.interval.String()}, cfg.localFlags...)
	cl, err := startLocal(ctx, cfg.local, bin, flags, progressWriter(cfg, stderr))
	if err != nil {
		os.RemoveAll(dir)
		cleanupBin()
		return nil, nil, err
	}
	return cl, func() { cl.stop(); os.RemoveAll(dir); cleanupBin() }, nil
}

// runRLQS plays the instances against targets for d.
func runRLQS(ctx context.Context, c *rlqsConfig, targets []string, d time.Duration) (*rlqsReport, error) {
	p, err := playRLQS(ctx, c, targets, d)
	if err != nil {
		return nil, err
	}
	p.wait()
	rep := analyse(c, p.sims, len(targets), d)
	for i, err := range p.errs {
		if err != nil {
			rep.StreamError = fmt.Sprintf("instance %d: %v", i, err)
		}
		rep.Reconnects += p.sims[i].reconnects
	}
	return rep, nil
}

// rlqsPlay is a run of the instances in progress: playRLQS starts it,
// wait waits for its end.
type rlqsPlay struct {
	sims  []*envoySim
	start time.Time
	errs  []error // per instance, the first stream error; set once wait returns
	wg    sync.WaitGroup
	done  func() // cancels the run's context, closes the connections
}

// playRLQS starts the instances against targets (instance i on target i
// modulo their number) for d, or until ctx ends.
func playRLQS(ctx context.Context, c *rlqsConfig, targets []string, d time.Duration) (*rlqsPlay, error) {
	conns := make([]*grpc.ClientConn, 0, len(targets))
	closeAll := func() {
		for _, cc := range conns {
			cc.Close()
		}
	}
	for _, a := range targets {
		cc, err := grpc.NewClient(a, append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, dialOptions...)...)
		if err != nil {
			closeAll()
			return nil, fmt.Errorf("dial %s: %w", a, err)
		}
		conns = append(conns, cc)
	}
	// Not a deadline: gRPC would send it to the servers, which could end a
	// stream before the run's context says it is over.
	runCtx, cancel := context.WithCancel(ctx)
	stop := time.AfterFunc(d, cancel)
	p := &rlqsPlay{sims: make([]*envoySim, len(c.demands)), errs: make([]error, len(c.demands)), start: time.Now(),
		done: func() { stop.Stop(); cancel(); closeAll() }}
	for i := range p.sims {
		p.sims[i] = &envoySim{expired: c.expired}
		// Instance i streams to target i first, and to the next one each
		// time its stream fails (Envoy's cluster picks another host).
		open := func(attempt int) (quotaStream, error) {
			n := (i + attempt) % len(conns)
			st, err := rlqspb.NewRateLimitQuotaServiceClient(conns[n]).StreamRateLimitQuotas(runCtx)
			if err != nil {
				return nil, fmt.Errorf("stream to %s: %w", targets[n], err)
			}
			return st, nil
		}
		demandAt := func(at time.Duration) float64 {
			if c.shiftAt > 0 && at >= c.shiftAt {
				return c.shiftTo[i]
			}
			return c.demands[i]
		}
		p.wg.Go(func() {
			p.errs[i] = p.sims[i].play(runCtx, open, c, p.start, c.interval*time.Duration(i)/time.Duration(len(p.sims)), demandAt)
		})
	}
	return p, nil
}

// wait waits for the end of the run and releases its connections.
func (p *rlqsPlay) wait() {
	p.wg.Wait()
	p.done()
}
