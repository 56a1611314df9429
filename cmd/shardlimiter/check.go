package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/shardlimiter/shardlimiter/internal/certs"

	"github.com/shardlimiter/shardlimiter/limit"
	"github.com/shardlimiter/shardlimiter/transport"
)

// runCheck is `shardlimiter check`: one check against a running server,
// printed for a human. Exit code 0 when admitted, 1 when over the limit or
// the server failed, 2 on usage errors.
func runCheck(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("shardlimiter check", flag.ContinueOnError)
	fs.SetOutput(stderr)
	server := fs.String("server", "localhost:8081", "gRPC address of any shardlimiter node")
	name := fs.String("name", "", "rule name, e.g. api_per_minute (required)")
	key := fs.String("key", "", "unique key, e.g. account:42 (required)")
	hits := fs.Int64("hits", 1, "hits to spend; 0 peeks")
	lim := fs.Int64("limit", 0, "hits allowed per --duration (required)")
	dur := fs.Duration("duration", time.Minute, "the period, e.g. 1s, 1m, 1h")
	alg := fs.String("algorithm", "TOKEN_BUCKET", "TOKEN_BUCKET, LEAKY_BUCKET, FIXED_WINDOW, SLIDING_WINDOW or SLIDING_LOG")
	burst := fs.Int64("burst", 0, "bucket capacity / leaky queue depth; 0 = algorithm default")
	minInterval := fs.Duration("min-interval", 0, "SLIDING_LOG: minimum gap between admitted hits")
	warmup := fs.Duration("warmup", 0, "TOKEN_BUCKET: warm-up period after idleness")
	reset := fs.Bool("reset", false, "forget the key's state first")
	countRejected := fs.Bool("count-rejected", false, "rejected hits still count")
	timeout := fs.Duration("timeout", 5*time.Second, "deadline of the call")
	tlsCA := fs.String("tls-ca", "", "PEM CA the server's certificate chains to: connect with TLS (the server's --tls-cert-file)")
	tlsCert := fs.String("tls-cert", "", "PEM client certificate, for a server with --tls-client-ca-file")
	tlsKey := fs.String("tls-key", "", "PEM key of --tls-cert")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitUsage
	}
	if s := getenv(envName("server")); s != "" && !isSet(fs, "server") {
		*server = s
	}
	c := limit.Check{Name: *name, Key: *key, Hits: *hits, Rule: limit.Rule{
		Limit: *lim, Period: *dur, Burst: *burst, MinInterval: *minInterval, Warmup: *warmup,
	}}
	a, ok := parseAlgorithm(*alg)
	if !ok {
		fmt.Fprintf(stderr, "shardlimiter check: unknown --algorithm %q\n", *alg)
		return exitUsage
	}
	c.Rule.Algorithm = a
	if *reset {
		c.Rule.Behavior |= limit.Reset
	}
	if *countRejected {
		c.Rule.Behavior |= limit.CountRejected
	}
	if err := c.Validate(); err != nil {
		fmt.Fprintf(stderr, "shardlimiter check: %v\n", err)
		return exitUsage
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	var opts []grpc.DialOption
	if *tlsCA != "" || *tlsCert != "" {
		st, err := certs.Load(certs.Files{Cert: *tlsCert, Key: *tlsKey, CA: *tlsCA})
		if err != nil {
			fmt.Fprintf(stderr, "shardlimiter check: %v\n", err)
			return exitUsage
		}
		cfg := st.ClientConfig()
		if host, _, err := net.SplitHostPort(*server); err == nil {
			// A client checks the server's name too, unlike a peer.
			cfg = &tls.Config{RootCAs: st.Pool(), ServerName: host, MinVersion: tls.VersionTLS12,
				GetClientCertificate: cfg.GetClientCertificate}
		}
		opts = append(opts, grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
	}
	client, err := transport.Dial(*server, opts...)
	if err != nil {
		fmt.Fprintf(stderr, "shardlimiter check: %v\n", err)
		return exitFail
	}
	defer client.Close()
	res, err := client.GetRateLimits(ctx, []limit.Check{c})
	if err != nil {
		fmt.Fprintf(stderr, "shardlimiter check: %s: %v\n", *server, err)
		return exitFail
	}
	printResult(stdout, c, res[0], time.Now())
	if res[0].Error != "" || !res[0].Allowed {
		return exitFail
	}
	return exitOK
}

func isSet(fs *flag.FlagSet, name string) (set bool) {
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

func parseAlgorithm(s string) (limit.Algorithm, bool) {
	for _, a := range limit.Algorithms() {
		if strings.EqualFold(s, a.String()) {
			return a, true
		}
	}
	return 0, false
}

// printResult writes one answer for a human.
func printResult(w io.Writer, c limit.Check, r limit.Result, now time.Time) {
	if r.Error != "" {
		fmt.Fprintf(w, "ERROR        %s %s: %s\n", c.Name, c.Key, r.Error)
		return
	}
	status := "UNDER_LIMIT"
	if !r.Allowed {
		status = "OVER_LIMIT"
	}
	fmt.Fprintf(w, "%-12s %s %s: %d of %d left (%s per %v)\n", status, c.Name, c.Key, r.Remaining, c.Rule.Limit, c.Rule.Algorithm, c.Rule.Period)
	reset := time.Unix(0, r.ResetAt).Sub(now).Round(time.Millisecond)
	fmt.Fprintf(w, "  reset in    %v\n", max(reset, 0))
	switch {
	case r.RetryAfter == limit.Never:
		fmt.Fprintf(w, "  retry after never: %d hits exceed the capacity\n", c.Hits)
	case r.RetryAfter > 0:
		fmt.Fprintf(w, "  retry after %v\n", r.RetryAfter)
	}
	if r.Delay > 0 {
		fmt.Fprintf(w, "  act after   %v (shaping delay)\n", r.Delay)
	}
	fmt.Fprintf(w, "  decided by  %s\n", r.Owner)
}
