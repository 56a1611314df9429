package main

import (
	"context"
	"crypto/tls"
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
	"github.com/shardlimiter/shardlimiter/transport/dial"
)

// runCheck is `shardlimiter check`: one check against a running server,
// printed for a human. Exit code 0 when admitted, 1 when over the limit or
// the server failed, 2 on usage errors. Without -limit, the rule is the
// rules file's rule of that -name, as for the API (rls.ByName).
func runCheck(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("shardlimiter check", flag.ContinueOnError)
	fs.SetOutput(stderr)
	server := fs.String("server", "localhost:8081", serverUsage)
	rf := addRuleFlags(fs)
	hits := fs.Int64("hits", 1, "hits to spend; 0 peeks")
	reset := fs.Bool("reset", false, "forget the key's state first")
	countRejected := fs.Bool("count-rejected", false, "rejected hits still count")
	timeout := fs.Duration("timeout", 5*time.Second, "deadline of the call")
	tf := addTLSFlags(fs)
	fs.Usage = func() {
		fmt.Fprintln(stderr, `Usage: shardlimiter check -name NAME -key KEY [-limit N -duration D -algorithm A …] [-hits H]

Spends hits on a key of a running node and prints the answer: exit 0 when
admitted, 1 when over the limit (or failed), 2 on a usage error. Without
-limit, the rule is the rules file's (--config) rule of that name.

The node is -server, else the environment variable SHARDLIMITER_SERVER,
else localhost:8081: its gRPC address host:port, or its HTTP API URL
http://host:8080 (https://… with -tls-ca).

Flags:`)
		fs.PrintDefaults()
	}
	if code, ok := parseWithServer(fs, args, getenv, server); !ok {
		return code
	}
	c, err := rf.check()
	if err != nil {
		fmt.Fprintf(stderr, "shardlimiter check: %v\n", err)
		return exitUsage
	}
	byName := !isSet(fs, "limit")
	if byName {
		c.Rule = limit.Rule{} // the rules file's: limit and duration 0
	}
	c.Hits = *hits
	if *reset {
		c.Rule.Behavior |= limit.Reset
	}
	if *countRejected {
		c.Rule.Behavior |= limit.CountRejected
	}
	if err := validateCheck(c, byName); err != nil {
		fmt.Fprintf(stderr, "shardlimiter check: %v\n", err)
		return exitUsage
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	addr, err := tf.grpcAddr(ctx, *server)
	if err != nil {
		fmt.Fprintf(stderr, "shardlimiter check: %v\n", err)
		return exitFail
	}
	client, code := tf.dial(addr, "check", stderr)
	if client == nil {
		return code
	}
	defer client.Close()
	res, err := client.GetRateLimits(ctx, []limit.Check{c})
	if err != nil {
		fmt.Fprintf(stderr, "shardlimiter check: %s: %v\n", addr, err)
		return exitFail
	}
	printResult(stdout, c, res[0], time.Now())
	if res[0].Error != "" || !res[0].Allowed {
		return exitFail
	}
	return exitOK
}

// validateCheck checks c before it is sent. A check by rule name carries
// no rule (the node fills it in from its rules file, and says when there
// is none): only its name, key and hits are checked here.
func validateCheck(c limit.Check, byName bool) error {
	if !byName {
		return c.Validate()
	}
	switch {
	case c.Name == "" || c.Key == "":
		return fmt.Errorf("-name and -key are required (without -limit, -name is a rule of the rules file)")
	case c.Hits < 0:
		return fmt.Errorf("-hits must be >= 0")
	}
	return nil
}

// ruleFlags are the flags of one check's identity and rule.
type ruleFlags struct {
	name, key, alg      *string
	lim, burst          *int64
	dur, minInt, warmup *time.Duration
}

func addRuleFlags(fs *flag.FlagSet) ruleFlags {
	return ruleFlags{
		name:   fs.String("name", "", "rule name, e.g. api_per_minute (required)"),
		key:    fs.String("key", "", "unique key, e.g. account:42 (required)"),
		lim:    fs.Int64("limit", 0, "hits allowed per --duration; unset: the rules file's rule of that -name"),
		dur:    fs.Duration("duration", time.Minute, "the period, e.g. 1s, 1m, 1h"),
		alg:    fs.String("algorithm", "TOKEN_BUCKET", "TOKEN_BUCKET, LEAKY_BUCKET, FIXED_WINDOW, SLIDING_WINDOW or SLIDING_LOG"),
		burst:  fs.Int64("burst", 0, "bucket capacity / leaky queue depth; 0 = algorithm default"),
		minInt: fs.Duration("min-interval", 0, "SLIDING_LOG: minimum gap between admitted hits"),
		warmup: fs.Duration("warmup", 0, "TOKEN_BUCKET: warm-up period after idleness"),
	}
}

// check is the check the flags describe (Hits 0, not validated).
func (f ruleFlags) check() (limit.Check, error) {
	a, ok := parseAlgorithm(*f.alg)
	if !ok {
		return limit.Check{}, fmt.Errorf("unknown --algorithm %q", *f.alg)
	}
	return limit.Check{Name: *f.name, Key: *f.key, Rule: limit.Rule{
		Algorithm: a, Limit: *f.lim, Period: *f.dur, Burst: *f.burst, MinInterval: *f.minInt, Warmup: *f.warmup,
	}}, nil
}

// tlsFlags are the client TLS flags of the subcommands.
type tlsFlags struct{ ca, cert, key *string }

func addTLSFlags(fs *flag.FlagSet) tlsFlags {
	return tlsFlags{
		ca:   fs.String("tls-ca", "", "PEM CA the server's certificate chains to: connect with TLS (the server's --tls-cert-file)"),
		cert: fs.String("tls-cert", "", "PEM client certificate, for a server with --tls-client-ca-file"),
		key:  fs.String("tls-key", "", "PEM key of --tls-cert"),
	}
}

// config is the client TLS configuration for server (host:port), nil
// without TLS flags.
func (f tlsFlags) config(server string) (*tls.Config, error) {
	if *f.ca == "" && *f.cert == "" {
		return nil, nil
	}
	st, err := certs.Load(certs.Files{Cert: *f.cert, Key: *f.key, CA: *f.ca})
	if err != nil {
		return nil, err
	}
	cfg := st.ClientConfig()
	if host, _, err := net.SplitHostPort(server); err == nil {
		// A client checks the server's name too, unlike a peer.
		cfg = &tls.Config{RootCAs: st.Pool(), ServerName: host, MinVersion: tls.VersionTLS12,
			GetClientCertificate: cfg.GetClientCertificate}
	}
	return cfg, nil
}

// dial connects to server's gRPC port; on failure it says so on stderr
// (as subcommand cmd) and returns nil and the exit code.
func (f tlsFlags) dial(server, cmd string, stderr io.Writer) (*dial.Client, int) {
	cfg, err := f.config(server)
	if err != nil {
		fmt.Fprintf(stderr, "shardlimiter %s: %v\n", cmd, err)
		return nil, exitUsage
	}
	var opts []grpc.DialOption
	if cfg != nil {
		opts = append(opts, grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
	}
	client, err := dial.Dial(server, opts...)
	if err != nil {
		fmt.Fprintf(stderr, "shardlimiter %s: %v\n", cmd, err)
		return nil, exitFail
	}
	return client, exitOK
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
	if c.Rule.Limit == 0 {
		fmt.Fprintf(w, "%-12s %s %s: %d left (the rules file's rule %s)\n", status, c.Name, c.Key, r.Remaining, c.Name)
	} else {
		fmt.Fprintf(w, "%-12s %s %s: %d of %d left (%s per %v)\n", status, c.Name, c.Key, r.Remaining, c.Rule.Limit, c.Rule.Algorithm, c.Rule.Period)
	}
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
