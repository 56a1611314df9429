package main

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"time"

	"github.com/shardlimiter/shardlimiter/api/native"
	"github.com/shardlimiter/shardlimiter/transport/server"

	"github.com/shardlimiter/shardlimiter/limit"
	"github.com/shardlimiter/shardlimiter/transport"
)

// calibrate measures an in-process gRPC server whose checker admits every
// check without any limiting work, with the same load as the real run:
// the ceiling the transport (gRPC, protobuf, loopback, this machine) puts
// on any server. Client and server share this process, so the client CPU
// it reports includes the server's.
func calibrate(ctx context.Context, cfg *config, stderr io.Writer) (*result, error) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	srv := server.NewClientListener(server.Config{MaxBatch: max(cfg.batch, transport.DefaultMaxBatch)})
	native.Register(srv, transport.CheckerFunc(admitAll), nil)
	srv.SetServing(true)
	var wg sync.WaitGroup
	var serveErr error
	wg.Go(func() { serveErr = srv.Serve(lis) })
	c := *cfg
	c.entryOne = false
	res, err := measure(ctx, &c, []string{lis.Addr().String()}, nil, stderr)
	srv.Stop()
	wg.Wait()
	if err != nil {
		return nil, errors.Join(err, serveErr)
	}
	res.Run = "calibration"
	res.CalibrationServer = calibrationInProcess
	res.Notes = nil
	res.note("client CPU includes the in-process server's")
	return res, nil
}

// calibrationOwner names the calibration server in its answers.
const calibrationOwner = "calibration"

// admitAll answers every check UNDER_LIMIT. The answers have the shape of a
// real server's (remaining, reset time, owner metadata), so that the
// client decodes as much per check as it does against a cluster; only the
// deciding is left out.
func admitAll(_ context.Context, checks []limit.Check) ([]limit.Result, error) {
	now := time.Now().UnixNano()
	res := make([]limit.Result, len(checks))
	for i := range checks {
		res[i] = limit.Result{
			Decision: limit.Decision{Allowed: true, Remaining: checks[i].Rule.Limit - checks[i].Hits, ResetAt: now + int64(checks[i].Rule.Period)},
			Owner:    calibrationOwner,
		}
	}
	return res, nil
}
