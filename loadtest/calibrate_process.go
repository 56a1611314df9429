package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"sync"

	"github.com/shardlimiter/shardlimiter/api/native"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/shardlimiter/shardlimiter/transport"
	"github.com/shardlimiter/shardlimiter/transport/server"
)

// The calibration server as a process of its own (--calibrate-process).
//
// In-process, the calibration server's CPU is the tool's: the two cannot
// be told apart. With --calibrate-process the tool starts its own binary
// again with the hidden first argument serveCalibrationArg: that child
// serves the admit-everything checker with a node's transport settings
// (connection limits, in-flight bound, transport metrics, the same
// defaults as `shardlimiter` with no flags), prints a serving line like a
// node's and serves /readyz and /metrics with the standard process
// collector. The tool starts it as it starts a --local node and reads its
// CPU as it reads a node's (process_cpu_seconds_total before and after),
// so the bare transport's server CPU per check and a node's are measured
// the same way, in one command:
//
//	go run ./loadtest --calibrate --calibrate-process --local 1 --batch 1
const serveCalibrationArg = "serve-calibration"

// calibrateProcess measures the calibration server started as a child
// process of this tool's binary.
func calibrateProcess(ctx context.Context, cfg *config, stderr io.Writer) (*result, error) {
	bin, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("--calibrate-process: this tool's binary: %w", err)
	}
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	nd, err := spawn(exec.CommandContext(cctx, bin, serveCalibrationArg, fmt.Sprintf("--max-batch=%d", max(cfg.batch, transport.DefaultMaxBatch))), nil, nil)
	if err != nil {
		return nil, err
	}
	defer func() {
		cancel() // SIGTERM: a graceful stop
		<-nd.exited
	}()
	nd.name = "calibration server"
	if err := nd.waitReady(cctx); err != nil {
		return nil, err
	}
	c := *cfg
	c.entryOne = false
	res, err := measure(ctx, &c, []string{nd.grpc}, []string{nd.http}, stderr)
	if err != nil {
		return nil, err
	}
	res.Run = "calibration"
	res.CalibrationServer = calibrationProcess
	res.Notes = nil
	return res, nil
}

// Where the calibration server ran (result.CalibrationServer).
const (
	calibrationInProcess = "in-process"
	calibrationProcess   = "process"
)

// serveCalibration is the child: it serves until ctx ends (SIGTERM), then
// stops gracefully.
func serveCalibration(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet(serveCalibrationArg, flag.ContinueOnError)
	fs.SetOutput(stderr)
	maxBatch := fs.Int("max-batch", transport.DefaultMaxBatch, "items of one call at most")
	addr := fs.String("addr", "127.0.0.1:0", "gRPC listen address")
	httpAddr := fs.String("http-addr", "127.0.0.1:0", "HTTP (/readyz, /metrics) listen address")
	if err := fs.Parse(args); err != nil {
		return exitUsage
	}
	if err := serveCalibrationOn(ctx, *addr, *httpAddr, *maxBatch, stdout); err != nil {
		fmt.Fprintf(stderr, "loadtest %s: %v\n", serveCalibrationArg, err)
		return exitFail
	}
	return exitOK
}

func serveCalibrationOn(ctx context.Context, addr, httpAddr string, maxBatch int, stdout io.Writer) error {
	glis, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	hlis, err := net.Listen("tcp", httpAddr)
	if err != nil {
		glis.Close()
		return err
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	tm := server.NewMetrics(reg)
	// A node's client listener with the default flags (cmd/shardlimiter):
	// the same limits, bound and metrics; only the checker differs.
	srv := server.NewClientListener(server.Config{
		MaxBatch:      maxBatch,
		Metrics:       tm,
		InFlight:      server.NewInFlight(server.DefaultInFlightChecks(maxBatch)),
		ServerOptions: server.ConnLimits{MaxRecvMsgSize: transport.MaxRequestBytes(maxBatch)}.ServerOptions(),
	})
	native.Register(srv, transport.CheckerFunc(admitAll), nil)
	srv.SetServing(true)
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ready\n") })
	hsrv := &http.Server{Handler: mux}

	var wg sync.WaitGroup
	var gerr, herr error
	wg.Go(func() { gerr = srv.Serve(glis) })
	wg.Go(func() {
		if err := hsrv.Serve(hlis); !errors.Is(err, http.ErrServerClosed) {
			herr = err
		}
	})
	fmt.Fprintf(stdout, "serving node=calibration http=%s grpc=%s\n", hlis.Addr(), glis.Addr())
	<-ctx.Done()
	srv.GracefulStop()
	hsrv.Close()
	wg.Wait()
	return errors.Join(gerr, herr)
}
