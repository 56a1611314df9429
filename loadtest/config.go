package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/shardlimiter/shardlimiter/limit"
	"github.com/shardlimiter/shardlimiter/loadtest/nemesis"
)

// Modes (--mode).
const (
	modeThroughput = "throughput"
	modeAccuracy   = "accuracy"
	modeIdle       = "idle"
)

// Per-mode defaults of the flags whose meaning depends on the mode; a flag
// given on the command line always wins.
const (
	throughputLimit     = limit.MaxLimit    // never trips: every check is admitted
	throughputLogLimit  = limit.MaxLogLimit // the largest SLIDING_LOG limit
	accuracyLimit       = 10
	accuracyKeys        = 8
	accuracyDuration    = 4 * time.Second // per algorithm
	accuracyPace        = 5.3             // attempts per key, as a multiple of the limit's rate (see accuracyRate)
	maxAccuracyKeys     = 1000            // one goroutine per key
	maxAccuracyAttempts = 20_000_000      // recorded attempts, 40 bytes each
	idleDuration        = 20 * time.Second
)

// config is the validated command line.
type config struct {
	targets        []string // gRPC addresses
	entryOne       bool     // everything to targets[0]
	client         string   // clientPlain or clientDirect (--client)
	clientInflight int      // --client direct: RPC slots per node; 0 = the client's default
	clientLeases   bool     // --client direct: the client holds leases of hot keys
	api            string   // apiNative or apiRLS (--api)
	local          int      // start a local cluster of this many nodes
	localFlags     []string // extra flags for the local servers
	serverBin      string   // prebuilt server binary for --local; empty builds one
	tlsCA          string   // PEM CA: connect with TLS; empty: plaintext
	tlsCert        string   // client certificate (mTLS)
	tlsKey         string
	metricsTargets []string // HTTP addresses serving /metrics
	calibrate      bool
	calibrateProc  bool // the calibration server as a child process

	mode        string
	duration    time.Duration
	concurrency int
	batch       int
	rate        float64 // checks/s; 0 = closed loop
	conns       int     // gRPC connections per target
	rpcTimeout  time.Duration
	backoff     bool

	keys       int
	dist       string
	zipfS      float64
	algorithms []limit.Algorithm
	rule       limit.Rule // Algorithm is set per run
	hits       int64
	seed       uint64

	faults    []string      // --faults: nemesis fault kinds; nil = all
	faultGap  time.Duration // --fault-gap: nemesis faults one at a time, this far apart; 0 = overlapping
	keepLogs  bool          // --keep-logs: nemesis keeps its nodes' logs
	churn     []churnEvent  // --churn, in time order; nil without
	churnSpec string

	idleLoad   time.Duration // --mode idle: load before the window; 0 = none
	idleSettle time.Duration // --mode idle: wait before the window

	rlqs rlqsConfig // --api rlqs

	json, quiet bool
	cpuProfile  string // write the tool's own CPU profile here
}

// errFlagParse marks an error the flag package has already printed.
var errFlagParse = errors.New("bad flag")

// rawFlags holds the flag values before validation.
type rawFlags struct {
	targets, metricsTargets, mode, dist, algorithm, faults string
	limit, burst                                           int64
	period                                                 time.Duration
}

func newFlagSet(out io.Writer, c *config, r *rawFlags) *flag.FlagSet {
	fs := flag.NewFlagSet("loadtest", flag.ContinueOnError)
	fs.SetOutput(out)
	fs.StringVar(&r.targets, "targets", "", "comma-separated gRPC addresses (host:port); each worker round-robins over them")
	fs.StringVar(&c.api, "api", apiNative, "what calls are: native (GetRateLimits, a batch of --batch checks) or rls (Envoy's ShouldRateLimit through go-control-plane's client: one descriptor per check, the rule as a limit override, so a FIXED_WINDOW of whole seconds whatever --algorithm says; needs no rules file), or gubernator (pb.gubernator.V1/GetRateLimits, a batch of --batch requests, TOKEN_BUCKET or LEAKY_BUCKET: what a node serves for gubernator's clients, and what gubernator itself serves), or rlqs (Envoy instances on Envoy's quota service, each enforcing its assignment: the --rlqs-* flags)")
	fs.StringVar(&c.client, "client", clientPlain, "how calls are sent: plain (--conns connections per target, each call to the worker's next target) or direct (the owner-aware client of package client: each check to its key's owner, concurrent calls merged per node)")
	fs.BoolVar(&c.entryOne, "entry-one", false, "send everything to the first target (the others are reached by forwarding)")
	fs.IntVar(&c.local, "local", 0, "build ./cmd/shardlimiter and start a local `N`-node cluster for the run, node i on 127.0.0.(10+i) (127.0.0.1 where only that binds)")
	fs.Func("local-flag", "extra flag for the --local servers, e.g. --local-flag=--fail-policy=open (repeatable)", func(s string) error {
		c.localFlags = append(c.localFlags, s)
		return nil
	})
	fs.StringVar(&c.tlsCA, "tls-ca", "", "PEM CA the servers' certificates chain to: every gRPC and HTTP connection uses TLS (for --local, give the servers their --tls-* flags with --local-flag)")
	fs.StringVar(&c.tlsCert, "tls-cert", "", "PEM client certificate, for servers that require one (--tls-client-ca-file)")
	fs.StringVar(&c.tlsKey, "tls-key", "", "PEM key of --tls-cert")
	fs.StringVar(&c.serverBin, "server-bin", "", "with --local: use this shardlimiter binary instead of building one")
	fs.StringVar(&c.churnSpec, "churn", "", "accuracy mode with --local: membership events during each algorithm's run, `OFFSET:EVENT,…` with EVENT join, leave=I, kill=I, restart=I or stop=I/D (I = node number from 1 in start order, node 1 never; D = pause), e.g. 6s:join,14s:leave=2,22s:restart=2; each algorithm gets a fresh cluster")
	fs.StringVar(&r.faults, "faults", "", "--mode nemesis: the fault kinds to inject, a comma list of kill, term, stop, partition, oneway, netem, diskfull, corrupt, allstop (default all; the network and disk ones need root)")
	fs.DurationVar(&c.faultGap, "fault-gap", 0, "--mode nemesis: inject one fault at a time, each starting this long after the one before ended (and its restart), so that each fault's recovery is measured alone and judged against its target (docs/RELIABILITY.md); 0 = overlapping faults")
	fs.BoolVar(&c.keepLogs, "keep-logs", false, "--mode nemesis: keep the directory of the nodes' stderr logs (and state dirs) and print its path")
	fs.StringVar(&r.metricsTargets, "metrics-targets", "", "comma-separated HTTP addresses whose /metrics give server CPU (automatic with --local)")
	fs.BoolVar(&c.calibrate, "calibrate", false, "first measure an in-process admit-everything gRPC server: the transport ceiling")
	fs.BoolVar(&c.calibrateProc, "calibrate-process", false, "with --calibrate: run the calibration server as a process of its own, with a node's transport settings, and report its server CPU as a node's")
	fs.StringVar(&r.mode, "mode", modeThroughput, "throughput, accuracy, idle (with --local: each node's CPU ticks from /proc over --duration, with no calls) or nemesis (a --local cluster of 3–5 nodes under a mixed load and a --seed schedule of faults, judged afterwards: docs/RELIABILITY.md)")
	fs.DurationVar(&c.duration, "duration", 10*time.Second, "length of the run (accuracy: per algorithm, default 4s; idle: the measured window, default 20s)")
	fs.DurationVar(&c.idleLoad, "idle-load", 0, "idle mode: first load the cluster this long with the throughput flags, then leave it alone (0 = no load)")
	fs.DurationVar(&c.idleSettle, "idle-settle", 10*time.Second, "idle mode: wait this long after forming (or after --idle-load) before measuring")
	fs.IntVar(&c.concurrency, "concurrency", 32, "workers, each with one call in flight (throughput mode)")
	fs.IntVar(&c.batch, "batch", 100, "checks per GetRateLimits call (throughput mode)")
	fs.Float64Var(&c.rate, "rate", 0, "open loop: checks/s on a fixed schedule (0 = closed loop); accuracy: total attempts/s (default 5.3× the limit's rate per key)")
	fs.IntVar(&c.conns, "conns", 1, "gRPC connections per target")
	fs.BoolVar(&c.clientLeases, "client-leases", false, "with --client direct: the client holds leases of its hot keys and decides their checks in-process (client.Config.Leases, threshold 1 check/s); the nodes need --leases and --client-leases (--local-flag)")
	fs.IntVar(&c.clientInflight, "client-inflight", 0, "with --client direct: RPCs in flight per node (client.Config.MaxInFlight; 0 = the client's default). Fewer slots merge more concurrent checks per RPC")
	fs.DurationVar(&c.rpcTimeout, "rpc-timeout", 2*time.Second, "deadline of one call")
	fs.BoolVar(&c.backoff, "backoff", false, "closed loop: after a call the server refused for overload, the worker waits the retry delay the server asked for before its next call (default: it calls again at once)")
	fs.IntVar(&c.keys, "keys", 100_000, "distinct keys (accuracy: default 8)")
	fs.StringVar(&r.dist, "dist", distUniform, "key distribution: uniform, zipf or hot (one key)")
	fs.Float64Var(&c.zipfS, "zipf-s", defaultZipfS, "Zipf exponent s > 1 for --dist zipf: P(key k) ∝ (1+k)^-s")
	fs.StringVar(&r.algorithm, "algorithm", "TOKEN_BUCKET", "TOKEN_BUCKET, LEAKY_BUCKET, FIXED_WINDOW, SLIDING_WINDOW, SLIDING_LOG; accuracy mode: also a comma list, or all")
	fs.Int64Var(&r.limit, "limit", 0, "hits per period (default: throughput 1e9, never trips (SLIDING_LOG 1e5); accuracy 10)")
	fs.DurationVar(&r.period, "period", time.Second, "the limit's period")
	fs.Int64Var(&r.burst, "burst", 0, "TOKEN_BUCKET capacity / LEAKY_BUCKET queue depth (0 = the algorithm's default)")
	fs.Int64Var(&c.hits, "hits", 1, "hits per check")
	fs.Uint64Var(&c.seed, "seed", 0, "random seed of the key streams and run id (0 = from the clock)")
	fs.BoolVar(&c.json, "json", false, "write one JSON object to stdout instead of the summary")
	fs.BoolVar(&c.quiet, "quiet", false, "no progress lines on stderr")
	defineRLQSFlags(fs, &c.rlqs)
	fs.StringVar(&c.cpuProfile, "cpuprofile", "", "write the tool's own CPU profile to this `file` (is the client the bottleneck?)")
	return fs
}

// parseFlags parses and validates args. Errors name the flag at fault.
func parseFlags(args []string, stderr io.Writer) (*config, error) {
	c, r := &config{}, &rawFlags{}
	fs := newFlagSet(stderr, c, r)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil, err
		}
		return nil, fmt.Errorf("%w: %w", errFlagParse, err)
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	c.targets = splitList(r.targets)
	c.faults = splitList(r.faults)
	c.metricsTargets = splitList(r.metricsTargets)
	c.mode, c.dist = r.mode, r.dist
	var err error
	if c.algorithms, err = parseAlgorithms(r.algorithm); err != nil {
		return nil, err
	}
	c.applyModeDefaults(set, r)
	if err := c.validate(set); err != nil {
		return nil, err
	}
	return c, nil
}

// applyModeDefaults fills the flags whose default depends on the mode.
func (c *config) applyModeDefaults(set map[string]bool, r *rawFlags) {
	c.rule = limit.Rule{Limit: r.limit, Period: r.period, Burst: r.burst}
	if c.mode == modeIdle && !set["duration"] {
		c.duration = idleDuration
	}
	if c.mode == modeNemesis {
		c.applyNemesisDefaults(set)
		return
	}
	if c.mode == modeAccuracy {
		if !set["limit"] {
			c.rule.Limit = accuracyLimit
		}
		if !set["keys"] {
			c.keys = accuracyKeys
		}
		if !set["duration"] {
			c.duration = accuracyDuration
		}
		return
	}
	if !set["limit"] {
		c.rule.Limit = throughputLimit
		if len(c.algorithms) == 1 && c.algorithms[0] == limit.SlidingLog {
			c.rule.Limit = throughputLogLimit
		}
	}
}

func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

// validate checks every value and combination; it reports them all.
func (c *config) validate(set map[string]bool) error {
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	switch {
	case c.mode != modeThroughput && c.mode != modeAccuracy && c.mode != modeIdle && c.mode != modeNemesis:
		bad("--mode: want throughput, accuracy, idle or nemesis, got %q", c.mode)
	case c.mode == modeNemesis && (c.local < 3 || c.local > 5 || c.calibrate || c.api != apiNative || c.client != clientPlain || c.churnSpec != ""):
		bad("--mode nemesis: runs its own load and faults on a --local cluster of 3 to 5 nodes (default 3), native API, plain client, without --calibrate or --churn")
	case c.mode == modeIdle && (c.local == 0 || c.calibrate):
		bad("--mode idle: measures the processes of a --local cluster, without --calibrate")
	case c.mode != modeIdle && (set["idle-load"] || set["idle-settle"]):
		bad("--idle-load and --idle-settle apply to --mode idle")
	case c.idleLoad < 0 || c.idleSettle < 0:
		bad("--idle-load and --idle-settle: want >= 0")
	case c.client != clientPlain && c.client != clientDirect:
		bad("--client: want plain or direct, got %q", c.client)
	case c.api != apiNative && c.api != apiRLS && c.api != apiGubernator && c.api != apiRLQS:
		bad("--api: want native, rls, gubernator or rlqs, got %q", c.api)
	case c.api == apiRLQS && (c.mode != modeThroughput || c.calibrate || c.churn != nil):
		bad("--api rlqs plays Envoy instances against the quota service: no --mode, --calibrate or --churn")
	case c.api != apiNative && c.client == clientDirect:
		bad("--api %s: --client direct sends native calls; use plain", c.api)
	case c.api == apiGubernator && c.mode == modeAccuracy:
		bad("--api gubernator: accuracy mode judges shardlimiter's algorithms; gubernator's count differently (docs/GUBERNATOR.md)")
	case len(c.targets) == 0 && c.local == 0 && !c.calibrate:
		bad("no targets: give --targets host:port,…, --local N or --calibrate")
	case c.tlsCA != "" && c.calibrate:
		bad("--tls-ca: the --calibrate server is plaintext; calibrate in a run of its own")
	case c.calibrateProc && !c.calibrate:
		bad("--calibrate-process needs --calibrate")
	case c.tlsCA == "" && (c.tlsCert != "" || c.tlsKey != ""):
		bad("--tls-cert and --tls-key need --tls-ca")
	case len(c.targets) > 0 && c.local > 0:
		bad("--targets and --local exclude each other")
	case c.local > 0 && len(c.metricsTargets) > 0:
		bad("--metrics-targets is automatic with --local")
	case c.local == 0 && (len(c.localFlags) > 0 || c.serverBin != ""):
		bad("--local-flag and --server-bin need --local N")
	}
	if c.local < 0 || c.local > 32 {
		bad("--local: want 1 to 32 nodes, got %d", c.local)
	}
	c.validateLoad(bad)
	c.validateRule(bad, set)
	if msg := checkRLSRule(c.rule); c.api == apiRLS && msg != "" {
		bad("%s", msg)
	}
	for _, a := range c.algorithms {
		if msg := checkGubernatorRule(c.ruleFor(a)); c.api == apiGubernator && msg != "" {
			bad("%s", msg)
		}
	}
	c.validateChurn(bad)
	c.validateModes(bad)
	return errors.Join(errs...)
}

// validateModes checks the flags of --api rlqs and --mode nemesis.
func (c *config) validateModes(bad func(string, ...any)) {
	if c.api == apiRLQS {
		c.rlqs.validate(bad)
	}
	for _, k := range c.faults {
		if !slices.Contains(nemesis.Kinds, k) {
			bad("--faults: unknown kind %q (want %s)", k, strings.Join(nemesis.Kinds, ", "))
		}
	}
	if len(c.faults) > 0 && c.mode != modeNemesis {
		bad("--faults applies to --mode nemesis")
	}
}

func (c *config) validateLoad(bad func(string, ...any)) {
	if c.duration <= 0 {
		bad("--duration: want > 0, got %v", c.duration)
	}
	if c.concurrency < 1 {
		bad("--concurrency: want >= 1, got %d", c.concurrency)
	}
	if c.batch < 1 {
		bad("--batch: want >= 1, got %d", c.batch)
	}
	if c.rate < 0 || math.IsNaN(c.rate) || math.IsInf(c.rate, 0) {
		bad("--rate: want >= 0 checks/s, got %v", c.rate)
	}
	if c.conns < 1 {
		bad("--conns: want >= 1, got %d", c.conns)
	}
	if c.clientInflight < 0 {
		bad("--client-inflight: want >= 0, got %d", c.clientInflight)
	}
	if c.clientInflight != 0 && c.client != clientDirect {
		bad("--client-inflight needs --client direct")
	}
	if c.clientLeases && c.client != clientDirect {
		bad("--client-leases needs --client direct")
	}
	if c.rpcTimeout <= 0 {
		bad("--rpc-timeout: want > 0, got %v", c.rpcTimeout)
	}
	if c.keys < 1 {
		bad("--keys: want >= 1, got %d", c.keys)
	}
	if c.dist != distUniform && c.dist != distZipf && c.dist != distHot {
		bad("--dist: want uniform, zipf or hot, got %q", c.dist)
	}
	if !(c.zipfS > 1) || math.IsInf(c.zipfS, 0) {
		bad("--zipf-s: want > 1, got %v", c.zipfS)
	}
}

func (c *config) validateAccuracy(bad func(string, ...any)) {
	if c.hits < 1 {
		bad("--hits: accuracy mode needs >= 1, got %d", c.hits)
	}
	if c.keys > maxAccuracyKeys {
		bad("--keys: accuracy mode runs one sender per key, at most %d, got %d", maxAccuracyKeys, c.keys)
	}
	if c.rule.Limit <= 0 || c.rule.Period <= 0 {
		return // reported by the rule check
	}
	if n := c.accuracyRate() * c.duration.Seconds(); n > maxAccuracyAttempts {
		bad("accuracy run would record %.0f attempts per algorithm, more than %d: lower --rate, --keys or --duration", n, maxAccuracyAttempts)
	}
}

// accuracyRate returns the attempts per second of an accuracy run over
// all keys: --rate, else accuracyPace × the limit's rate per key. The pace
// is well above the limit, so that every key is limited all the time, and
// not a whole multiple of it, so that attempts do not keep landing exactly
// on the instant a hit becomes admissible, where the few hundred
// microseconds between send and decision would decide each time.
func (c *config) accuracyRate() float64 {
	if c.rate > 0 {
		return c.rate
	}
	return float64(c.keys) * accuracyPace * float64(c.rule.Limit) / c.rule.Period.Seconds()
}

// validateChurn parses --churn and checks that it applies: accuracy mode
// against a --local cluster, the calibration left out.
func (c *config) validateChurn(bad func(string, ...any)) {
	if c.churnSpec == "" {
		return
	}
	switch {
	case !churnSupported:
		bad("--churn: needs a Unix system (it signals the server processes)")
	case c.local == 0 || c.mode != modeAccuracy:
		bad("--churn: applies to --mode accuracy with a --local cluster")
	case c.calibrate:
		bad("--churn: measures the --local cluster; leave out --calibrate")
	case c.duration > 0: // else reported by validateLoad
		var err error
		if c.churn, err = parseChurn(c.churnSpec, c.local, c.duration); err != nil {
			bad("%v", err)
		}
	}
}
