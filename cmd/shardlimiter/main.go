// Command shardlimiter runs a shardlimiter node, or, as `shardlimiter
// check`, asks a running node one question, or, as `shardlimiter inspect
// key|match`, reads a key's state or which rule descriptors match without
// counting, or, as `shardlimiter config check FILE…`, validates rules
// files offline, or, as `shardlimiter version` (or --version), prints its
// version.
//
// With no arguments it serves on one machine with defaults: HTTP on :8080,
// gRPC on :8081 (the client API), peer RPCs on :8082 (other nodes only; by
// default on the host of --grpc-addr), gossip on :7946, a cluster of one.
// Every flag can also be set through its SHARDLIMITER_* environment
// variable; see --help and the configuration table of README.md.
//
// This package is wiring only: flags and environment → configuration,
// listeners, metrics registry, logger, signals.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	code := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// Exit codes.
const (
	exitOK    = 0
	exitFail  = 1 // the server failed, or `check` was answered OVER_LIMIT
	exitUsage = 2 // bad flags or environment
)

// run is main without the process: ctx done means SIGTERM/SIGINT. Serving
// logs to stderr and prints one "serving" line with the bound addresses
// to stdout once every listener is up.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "check" {
		return runCheck(ctx, args[1:], getenv, stdout, stderr)
	}
	if len(args) > 0 && args[0] == "inspect" {
		return runInspect(ctx, args[1:], getenv, stdout, stderr)
	}
	if len(args) > 0 && args[0] == "config" {
		return runConfig(args[1:], stdout, stderr)
	}
	if len(args) > 0 && (args[0] == "version" || args[0] == "--version" || args[0] == "-version") {
		return runVersion(args[1:], stdout, stderr)
	}
	cfg, err := parseConfig(args, getenv, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	if err != nil {
		fmt.Fprintf(stderr, "shardlimiter: %v\n", err)
		return exitUsage
	}
	log := newLogger(cfg, stderr)
	applyMemoryBudget(cfg, getenv, log)
	s, err := newServer(cfg, log)
	if err != nil {
		log.Error("cannot start", "err", err)
		return exitFail
	}
	if err := s.serve(ctx, stdout); err != nil {
		log.Error("server failed", "err", err)
		return exitFail
	}
	return exitOK
}
