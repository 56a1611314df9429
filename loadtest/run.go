package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"google.golang.org/grpc/status"

	"github.com/shardlimiter/shardlimiter/limit"
	"github.com/shardlimiter/shardlimiter/transport"
	"github.com/shardlimiter/shardlimiter/transport/dial"
)

// ruleName is the rule name of every check the tool sends.
const ruleName = "loadtest"

// probeTimeout bounds the first call to each target, so that a target that
// is down or unreachable is reported within seconds.
const probeTimeout = 5 * time.Second

// execute runs what cfg asks for: the calibration, then the local cluster
// or the targets, and returns the report.
func execute(ctx context.Context, cfg *config, stderr io.Writer) (*result, error) {
	defer httpClient.CloseIdleConnections()
	if cfg.tlsCA != "" {
		if err := useTLS(cfg.tlsCA, cfg.tlsCert, cfg.tlsKey); err != nil {
			return nil, err
		}
	}
	var cal *result
	if cfg.calibrate {
		calibrateFn := calibrate
		if cfg.calibrateProc {
			calibrateFn = calibrateProcess
		}
		var err error
		if cal, err = calibrateFn(ctx, cfg, stderr); err != nil {
			return nil, fmt.Errorf("calibrate: %w", err)
		}
		if len(cfg.targets) == 0 && cfg.local == 0 || ctx.Err() != nil {
			return cal, nil
		}
	}
	targets, metrics := cfg.targets, cfg.metricsTargets
	if cfg.local > 0 {
		bin, cleanup, err := serverBinary(ctx, cfg.serverBin, progressWriter(cfg, stderr))
		if err != nil {
			return nil, fmt.Errorf("local cluster: %w", err)
		}
		defer cleanup()
		if cfg.churn != nil {
			return runChurnAccuracy(ctx, cfg, bin, stderr)
		}
		cl, err := startLocal(ctx, cfg.local, bin, cfg.localFlags, progressWriter(cfg, stderr))
		if err != nil {
			return nil, fmt.Errorf("local cluster: %w", err)
		}
		defer cl.stop()
		targets, metrics = cl.grpcAddrs(), cl.httpAddrs()
	}
	res, err := measure(ctx, cfg, targets, metrics, stderr)
	if err != nil {
		return nil, err
	}
	res.attachCalibration(cal)
	return res, nil
}

// measure runs the configured mode against targets.
func measure(ctx context.Context, cfg *config, targets, metrics []string, stderr io.Writer) (*result, error) {
	if cfg.entryOne {
		targets = targets[:1]
	}
	dial := dialTargets
	if cfg.client == clientDirect {
		dial = func(addrs []string, _ int) ([]*target, error) {
			return dialDirect(addrs, cfg.clientInflight, cfg.clientLeases)
		}
	}
	switch cfg.api {
	case apiRLS:
		dial = dialRLS
	case apiGubernator:
		dial = dialGubernator
	}
	ts, err := dial(targets, cfg.conns)
	if err != nil {
		return nil, err
	}
	defer closeTargets(ts)
	if err := probe(ctx, ts, cfg.batch); err != nil {
		return nil, err
	}
	if cfg.mode == modeAccuracy {
		return runAccuracy(ctx, cfg, ts, metrics, stderr)
	}
	return runThroughput(ctx, cfg, ts, metrics, stderr)
}

// target is one gRPC address and its connections.
type target struct {
	addr  string
	conns []checker
}

func dialTargets(addrs []string, conns int) ([]*target, error) {
	var ts []*target
	for _, a := range addrs {
		t := &target{addr: a}
		ts = append(ts, t)
		for range conns {
			c, err := dial.Dial(a, dialOptions...)
			if err != nil {
				closeTargets(ts)
				return nil, err
			}
			t.conns = append(t.conns, c)
		}
	}
	return ts, nil
}

func targetAddrs(ts []*target) (out []string) {
	for _, t := range ts {
		out = append(out, t.addr)
	}
	return out
}

func closeTargets(ts []*target) {
	for _, t := range ts {
		for _, c := range t.conns {
			c.Close()
		}
	}
}

// probe sends one batch of peeks (hits 0: nothing consumed) of the run's
// size over every connection. It opens the connections before the clock
// starts and turns a target that is down, or a batch the server refuses,
// into one clear error naming the address. A refusal for overload is
// retried until probeTimeout.
func probe(ctx context.Context, ts []*target, batch int) error {
	checks := make([]limit.Check, batch)
	for i := range checks {
		checks[i] = limit.Check{Name: ruleName, Key: "probe", Rule: limit.Rule{Limit: 1, Period: time.Second}}
	}
	for _, t := range ts {
		for _, c := range t.conns {
			pctx, cancel := context.WithTimeout(ctx, probeTimeout)
			_, err := c.GetRateLimits(pctx, checks)
			// A node refusing for overload (another client's flood) is
			// up: ask again after its retry delay, within the timeout.
			for transport.IsShed(err) && pctx.Err() == nil {
				d, _ := transport.RetryDelay(err)
				select {
				case <-pctx.Done():
				case <-time.After(d):
					_, err = c.GetRateLimits(pctx, checks)
				}
			}
			cancel()
			if err != nil {
				return fmt.Errorf("target %s does not answer: %w", t.addr, err)
			}
		}
	}
	return nil
}

// runID returns a short random prefix for the keys of one run, so that two
// runs (or two algorithms of one run) never share limiter state.
func runID(seed uint64) string {
	if seed != 0 {
		return fmt.Sprintf("%x", seed)
	}
	var b [4]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// runThroughput drives --concurrency workers for --duration and measures.
func runThroughput(ctx context.Context, cfg *config, ts []*target, metrics []string, stderr io.Writer) (*result, error) {
	keys := keyNames("lt-"+runID(cfg.seed)+"-", cfg.keys)
	seed := cfg.seed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	rule := cfg.ruleFor(cfg.algorithms[0])
	calls := make([]call, cfg.concurrency)
	for i := range calls {
		gen, err := newKeyGen(cfg.dist, cfg.keys, cfg.zipfS, seed, uint64(i))
		if err != nil {
			return nil, err
		}
		calls[i] = batchCall(cfg, rule, ts, i, keys, gen)
	}
	before := sample(ctx, metrics)
	start := time.Now()
	var sched schedule = closedLoop{end: start.Add(cfg.duration)}
	if cfg.rate > 0 {
		sched = newOpenLoop(start, start.Add(cfg.duration), cfg.rate/float64(cfg.batch))
	}
	col := drain(ctx, cfg, start, sched, calls, stderr)
	res := newResult(cfg, rule, targetAddrs(ts), col, before.until(sample(ctx, metrics)))
	if ol, ok := sched.(*openLoop); ok {
		res.setOpenLoop(cfg.rate, ol.scheduled(), col)
	}
	res.Interrupted = ctx.Err() != nil
	return res, nil
}

// drain runs one worker per call under sched until the schedule ends, then
// gives calls in flight (and, open loop, calls already due) rpcTimeout +
// 1s to finish. It reports progress every second.
func drain(ctx context.Context, cfg *config, start time.Time, sched schedule, calls []call, stderr io.Writer) *collector {
	rctx, cancel := context.WithDeadline(ctx, start.Add(cfg.duration+cfg.rpcTimeout+time.Second))
	defer cancel()
	col := newCollector(len(calls), start)
	stopProgress := col.progress(progressWriter(cfg, stderr))
	var wg sync.WaitGroup
	for i, do := range calls {
		wg.Go(func() { drive(rctx, sched, do, col.shards[i]) })
	}
	wg.Wait()
	stopProgress()
	col.finish()
	return col
}

// batchCall returns worker i's call: one batch of checks on keys drawn
// from gen, to the targets in turn.
func batchCall(cfg *config, rule limit.Rule, ts []*target, worker int, keys []string, gen keyGen) call {
	checks := make([]limit.Check, cfg.batch)
	for i := range checks {
		checks[i] = limit.Check{Name: ruleName, Hits: cfg.hits, Rule: rule}
	}
	next := worker
	return func(ctx context.Context) outcome {
		for i := range checks {
			checks[i].Key = keys[gen()]
		}
		t := ts[next%len(ts)]
		next++
		cctx, cancel := context.WithTimeout(ctx, cfg.rpcTimeout)
		res, err := t.conns[worker%len(t.conns)].GetRateLimits(cctx, checks)
		cancel()
		o := judgeCall(res, err)
		if o.refused && cfg.backoff {
			o.backoff, _ = transport.RetryDelay(err)
		}
		return o
	}
}

// judgeCall counts what the answer to one call says.
func judgeCall(res []limit.Result, err error) outcome {
	if transport.IsShed(err) {
		return outcome{refused: true}
	}
	if err != nil {
		return outcome{rpcErr: rpcErrorKind(err)}
	}
	o := outcome{checks: int64(len(res))}
	for i := range res {
		switch {
		case res[i].Error != "":
			if o.itemErrs == nil {
				o.itemErrs = map[string]int64{}
			}
			o.itemErrs[itemErrorKind(res[i].Reason)]++
		case res[i].Allowed:
			o.admitted++
		default:
			o.rejected++
		}
	}
	return o
}

// rpcDeadlineExceeded is the kind of a call that exceeded its deadline.
const rpcDeadlineExceeded = "rpc:DeadlineExceeded"

// rpcErrorKind names a failed call by its gRPC code, e.g.
// "rpc:Unavailable".
func rpcErrorKind(err error) string {
	if errors.Is(err, context.DeadlineExceeded) {
		return rpcDeadlineExceeded
	}
	return "rpc:" + status.Code(err).String()
}

// progressWriter is where progress lines go: stderr, or nowhere (--quiet).
func progressWriter(cfg *config, stderr io.Writer) io.Writer {
	if cfg.quiet {
		return io.Discard
	}
	return stderr
}
