// Command sidecar-app is the sample application of the Kubernetes sidecar
// overlay (k8s/overlays/sidecar): an HTTP server whose every request is
// rate-limited through package client/httplimit, against the shardlimiter
// sidecar on localhost. It is an example to copy from, not part of the
// shardlimiter binary.
//
//	go run ./examples/sidecar-app                      # limiter on localhost:8081
//	curl -i -H 'X-Account: 42' localhost:8080/
//
// Each request is one check of the rule "app_per_minute" for the account
// in the X-Account header (the client address without one): admitted
// requests get 200 and the IETF RateLimit and RateLimit-Policy fields,
// rejected ones 429 with Retry-After.
//
// Configuration, from the environment:
//
//	RATE_LIMITER_ADDR  the limiter's gRPC address (default localhost:8081)
//	LISTEN_ADDR        this server's address (default :8080)
//	RATE_LIMIT         requests per minute per account (default 60)
//	FAIL_OPEN          true: serve requests while the limiter is unreachable
//	                   (default); false: answer them 503
//	OWNER_ROUTING      true (default): send each check to its key's owner,
//	                   the sidecar of another pod, learned from the
//	                   sidecar; false: send every check to the sidecar,
//	                   which forwards it
//
// The container image (see the overlay's app-deployment.yaml):
//
//	CGO_ENABLED=0 GOOS=linux go build -trimpath -o examples/sidecar-app/sidecar-app ./examples/sidecar-app
//	docker build -t sidecar-app:dev examples/sidecar-app
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/shardlimiter/shardlimiter/client"
	"github.com/shardlimiter/shardlimiter/client/httplimit"
	"github.com/shardlimiter/shardlimiter/limit"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx); err != nil {
		slog.Error("sidecar-app", "err", err)
		os.Exit(1)
	}
}

// settings is the configuration read from the environment.
type settings struct {
	limiter, listen string
	perMinute       int64
	failOpen        bool
	routing         bool
}

func readSettings() (settings, error) {
	s := settings{
		limiter:   envOr("RATE_LIMITER_ADDR", "localhost:8081"),
		listen:    envOr("LISTEN_ADDR", ":8080"),
		perMinute: 60, failOpen: true, routing: true,
	}
	var errs []error
	if v := os.Getenv("RATE_LIMIT"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n <= 0 {
			errs = append(errs, fmt.Errorf("RATE_LIMIT: want a positive integer, got %q", v))
		}
		s.perMinute = n
	}
	for name, dst := range map[string]*bool{"FAIL_OPEN": &s.failOpen, "OWNER_ROUTING": &s.routing} {
		if v := os.Getenv(name); v != "" {
			b, err := strconv.ParseBool(v)
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: want true or false, got %q", name, v))
			}
			*dst = b
		}
	}
	return s, errors.Join(errs...)
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

func run(ctx context.Context) error {
	s, err := readSettings()
	if err != nil {
		return err
	}
	// New waits for the first ring from the sidecar, here at most 10 s;
	// without one it sends every check to the sidecar until the ring
	// arrives. The overlay starts the sidecar first, so this is quick.
	nctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	c, err := client.New(nctx, client.Config{Targets: []string{s.limiter}, NoRouting: !s.routing})
	cancel()
	if err != nil {
		return err
	}
	defer c.Close()
	limited, err := httplimit.New(httplimit.Config{
		Checker:  c,
		Name:     "app_per_minute",
		Rule:     limit.Rule{Algorithm: limit.TokenBucket, Limit: s.perMinute, Period: time.Minute},
		Key:      accountKey,
		FailOpen: s.failOpen,
	})
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	mux.Handle("/", limited(http.HandlerFunc(hello)))
	srv := &http.Server{Addr: s.listen, Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.ListenAndServe() }()
	slog.Info("serving", "addr", s.listen, "limiter", s.limiter, "per_minute", s.perMinute, "owner_routing", s.routing)
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	// Drain before the client closes: requests in progress still check.
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return srv.Shutdown(sctx)
}

// accountKey limits by the X-Account header, else by the client's address.
func accountKey(r *http.Request) string {
	if a := r.Header.Get("X-Account"); a != "" {
		return "account:" + a
	}
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	return "addr:" + host
}

func hello(w http.ResponseWriter, r *http.Request) {
	fmt.Fprintf(w, "hello, %s\n", accountKey(r))
}
