package main

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"

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
	srv := transport.NewGRPCServer(transport.GRPCConfig{
		Checker:  transport.CheckerFunc(admitAll),
		MaxBatch: max(cfg.batch, transport.DefaultMaxBatch),
	})
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
	res.Notes = nil
	res.note("client CPU includes the in-process server's")
	return res, nil
}

// admitAll answers every check UNDER_LIMIT with its limit remaining.
func admitAll(_ context.Context, checks []limit.Check) ([]limit.Result, error) {
	res := make([]limit.Result, len(checks))
	for i := range checks {
		res[i].Allowed = true
		res[i].Remaining = checks[i].Rule.Limit
	}
	return res, nil
}
