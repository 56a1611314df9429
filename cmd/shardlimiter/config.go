package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/shardlimiter/shardlimiter/gossip"
	"github.com/shardlimiter/shardlimiter/peer"
)

// envPrefix prefixes the environment variable of every flag:
// --grpc-addr is also read from SHARDLIMITER_GRPC_ADDR.
const envPrefix = "SHARDLIMITER_"

// config is the validated command line of the server.
type config struct {
	httpAddr      string
	grpcAddr      string
	peerAddr      string
	healthAddr    string // empty: no separate health listener
	gubHTTPAddr   string // empty: no gubernator HTTP gateway
	resp          respConfig
	gossipAddr    string
	gossipKeyFile string
	probeInterval time.Duration // --gossip-probe-interval
	peerTLS       tlsFiles
	clientTLS     tlsFiles // ca is the client CA: set means mTLS
	advertiseAddr string
	join          []string
	nodeName      string
	maxKeys       int
	maxBatch      int
	logLevel      slog.Level
	logFormat     string
	failPolicy    peer.FailPolicy
	shutdownGrace time.Duration
	peerTimeout   time.Duration
	peerInFlight  int // --peer-inflight: forwarding RPCs in flight to one peer
	replication   time.Duration
	handoff       time.Duration
	stateDir      string        // empty: state in memory only
	snapshotEvery time.Duration // with stateDir
	snapshotName  string        // empty: the node name
	pprof         bool
	leases        bool    // --leases
	leaseRate     float64 // --lease-threshold, checks per second of one key
	clientLeases  bool    // --client-leases: any client may hold leases (unauthenticated)
	rls           rlsConfig
	maxInflight   int64  // client checks in flight; 0 = no bound
	maxPeerFlight int64  // forwarded checks and state keys in flight; 0 = no bound
	maxMemory     int64  // bytes; see memory.go
	memorySource  string // where maxMemory came from: flag, cgroup or default
	readTimeout   time.Duration
	idleTimeout   time.Duration
	// Per-rule metrics: rule names with series of their own, and series
	// of detailed_metric descriptor values (0 = none).
	metricsMaxRules    int
	metricsMaxDetailed int
}

// envName returns the environment variable that also sets flag name.
func envName(flagName string) string {
	return envPrefix + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// newFlagSet declares the server's flags; values land in raw strings and
// are validated by parseConfig, so flags and environment share one path.
func newFlagSet(name string, out io.Writer) (*flag.FlagSet, map[string]*string) {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(out)
	raw := map[string]*string{}
	def := func(name, value, usage string) {
		raw[name] = fs.String(name, value, usage+" (env "+envName(name)+")")
	}
	def("http-addr", ":8080", "HTTP listen address: JSON API, /healthz, /readyz, /metrics, /v1/cluster")
	def("grpc-addr", ":8081", "gRPC listen address: the client API (RateLimiter, health, reflection)")
	def("peer-addr", "", "gRPC listen address for other nodes only: forwarded checks and state transfer (Peers, State); default: the --grpc-addr host, port "+defaultPeerPort+" (:"+defaultPeerPort+" when --grpc-addr names no host)")
	def("health-addr", "", "optional plain-HTTP listen address serving only /healthz and /readyz, for kubelet probes when the HTTP API uses TLS; empty = none")
	def("gubernator-http-addr", "", "optional HTTP listen address of gubernator's gateway (POST /v1/GetRateLimits, GET /v1/HealthCheck, GET /v1/LiveCheck; docs/GUBERNATOR.md); empty = none. Its gRPC API, pb.gubernator.V1, is always on --grpc-addr")
	def("resp-addr", "", "optional listen address of the Redis protocol: redis-cell's CL.THROTTLE, SL.CHECK and what Redis clients send on connect (docs/REDIS.md); under the client TLS when it is on; empty = none")
	def("resp-password-file", "", "with --resp-addr: file holding the password AUTH must give (one line; read at start); empty = no AUTH")
	def("resp-max-conns", "1000", "with --resp-addr: most open Redis-protocol connections; more are refused at accept")
	def("resp-idle-timeout", "5m", "with --resp-addr: a connection that sends nothing for this long, or whose command is not whole this long after its first byte, is closed")
	def("gossip-addr", ":7946", "gossip (memberlist) listen address, TCP and UDP")
	def("gossip-probe-interval", "500ms", "how often this node probes one other member for failure detection: a crashed node leaves the ring about 4-6 of these after the crash (2.5-3 s at 500ms); longer costs an idle node less and notices a crash later (docs/PERFORMANCE.md, 'Idle against the probe interval'); 100ms to 1m")
	def("gossip-key-file", "", "file of base64 AES keys (16, 24 or 32 bytes), one per line: the first encrypts, all decrypt; re-read when it changes or on SIGHUP; empty = gossip in plaintext")
	def("peer-tls-cert-file", "", "PEM certificate this node presents to peers, both as server and as client (mTLS); reloaded when it changes")
	def("peer-tls-key-file", "", "PEM private key of --peer-tls-cert-file")
	def("peer-tls-ca-file", "", "PEM CA bundle peers' certificates must chain to; with the two above turns on peer mTLS")
	def("tls-cert-file", "", "PEM certificate for the client gRPC and HTTP listeners; turns on TLS there; reloaded when it changes")
	def("tls-key-file", "", "PEM private key of --tls-cert-file")
	def("tls-client-ca-file", "", "PEM CA bundle client certificates must chain to; requires client certificates (mTLS)")
	def("advertise-addr", "", "host or IP peers use to reach this node (in Kubernetes the pod IP); default: the listen host, else the first non-loopback address")
	def("join", "", "comma-separated host:port seeds or DNS names to join; a DNS name joins every address it resolves to; empty = cluster of one")
	def("node-name", "", "unique node name; default: <hostname>-<advertise host>-<gossip port>")
	def("max-keys", "1000000", "key cap of each algorithm's table; least recently used keys are evicted beyond it")
	def("max-batch", "1000", "most checks in one GetRateLimits call")
	def("log-level", "info", "debug, info, warn or error")
	def("log-format", "text", "text or json")
	def("fail-policy", "local", "when a key's owner is unreachable: local (decide here), open (admit) or closed (item error)")
	def("shutdown-grace", "5s", "on SIGTERM: how long to keep answering after leaving the cluster, while peers re-route")
	def("peer-timeout", "1s", "deadline of one forwarding RPC to a peer")
	def("peer-inflight", "4", "forwarding RPCs in flight to one peer at once; while all are busy, the checks of concurrent client calls wait and go together in the next: fewer slots, fewer and larger messages (less CPU under load), more waiting")
	def("replication-interval", "100ms", "how often changed keys are sent to the node that would own them next, so a crash loses at most this much of each key's hits; 0 turns replication off")
	def("lease-threshold", "100", "with --leases: the rate, in checks per second this node forwards for one key, above which it asks the key's owner for a lease and decides the key's checks itself")
	def("handoff-timeout", "5s", "on SIGTERM: how long to wait for the new owners to take this node's keys before exiting anyway")
	def("state-dir", "", "directory of this node's snapshot file (named after --node-name, so nodes may share it): key states are written there every --snapshot-interval and at stop, and merged back at start, so counts survive a stop of every node; empty = memory only")
	def("snapshot-name", "", "with --state-dir: the name of this node's snapshot file; give the processes that replace each other on one host the same name (in Kubernetes, the node's name) so that each finds its predecessor's file; default: --node-name")
	def("snapshot-interval", "10s", "with --state-dir: how often the snapshot is written when something changed; a crash of every node loses at most this much of each key's hits")
	def("max-inflight", "auto", "most client checks (gRPC and HTTP, weighted by batch size) in progress at once, shared fairly between gRPC connections and HTTP client addresses; a call past it is refused at once with RESOURCE_EXHAUSTED / HTTP 429 and a retry delay; auto = 8 × GOMAXPROCS × --max-batch; 0 = no bound")
	def("max-peer-inflight", "auto", "most forwarded checks and state keys in progress at once on the peer listener, a bound of its own so client floods cannot starve owners; auto = 2 × the automatic --max-inflight; 0 = no bound")
	def("max-memory", "auto", "the node's memory budget: 512MiB, 2GiB, 1G (10^9) or plain bytes; the tables keep within a share of it and the Go runtime collects before it is reached (unless GOMEMLIMIT is set); auto = the cgroup memory limit, else 2GiB; the Go runtime's soft limit is 90% of it, the tables' byte budget half")
	def("read-timeout", "15s", "HTTP: longest time to read a whole request, headers and body; a stalled upload is closed after it")
	def("idle-timeout", "60s", "HTTP keep-alive and client gRPC connections with no request in progress are closed after this long")
	def("metrics-max-rules", "1000", "most rule names with per-rule metric series of their own (shardlimiter_rule_*); checks of further names are counted under rule=\"other\"")
	def("metrics-max-detailed", "0", "most series of detailed_metric rules (their descriptor values in the rule label, as envoyproxy/ratelimit's detailed_metric); further values are counted under their rule's path; 0 = detailed_metric is ignored")
	def("config", "", "comma-separated rules files or directories (envoyproxy/ratelimit's YAML; docs/RULES.md), reloaded when they change; empty = no rules")
	def("rlqs-report-interval", "5s", "Envoy quota service (docs/RLQS.md): how often Envoy reports (about 5s whatever its configuration); assignments live two of these (whole seconds)")
	def("rlqs-max-streams", "10000", "Envoy quota service: most open RLQS streams on this node; more are refused with RESOURCE_EXHAUSTED")
	def("rls-headers-format", "ietf", "Envoy rate-limit service, with --rls-headers: ietf (RateLimit and RateLimit-Policy, draft-ietf-httpapi-ratelimit-headers-11) or ratelimit (envoyproxy/ratelimit's RateLimit-Limit, RateLimit-Remaining, RateLimit-Reset)")
	def("rls-header-limit", "RateLimit-Limit", "Envoy rate-limit service: name of the limit header of --rls-headers-format ratelimit")
	def("rls-header-remaining", "RateLimit-Remaining", "Envoy rate-limit service: name of the remaining header of --rls-headers-format ratelimit")
	def("rls-header-reset", "RateLimit-Reset", "Envoy rate-limit service: name of the reset header of --rls-headers-format ratelimit")
	defineBools(fs, raw)
	fs.Usage = func() { usage(fs, out, name) }
	return fs, raw
}

// defineBools defines the boolean flags, each also read from its
// environment variable.
func defineBools(fs *flag.FlagSet, raw map[string]*string) {
	for name, usage := range map[string]string{
		"shadow-mode":                        "Envoy rate-limit service: count and report every rule, but always answer OK",
		"rls-headers":                        "Envoy rate-limit service: add rate-limit response headers for the descriptor closest to its limit (format: --rls-headers-format)",
		"rls-stop-increment-when-over-limit": "Envoy rate-limit service: count only the hits a descriptor admits (envoyproxy/ratelimit's STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT); by default every hit counts, past the limit",
		"rls-dynamic-metadata":               "Envoy rate-limit service: return envoyproxy/ratelimit's dynamic metadata (domain, descriptors, hitsAddend, the metadata of the rules that passed), as its RESPONSE_DYNAMIC_METADATA",
		"leases":                             "lease hot keys (docs/ARCHITECTURE.md, Leases): grant shares of the keys this node owns to the nodes that ask, each debited from the key, and ask for them for the TOKEN_BUCKET, FIXED_WINDOW and SLIDING_WINDOW keys this node forwards above --lease-threshold, deciding their checks here (a rules file's lease: false opts a limit out); exact; on by default, --leases=false turns them off",
		"client-leases":                      "let any client process hold leases of hot keys (shardlimiter.v1.Leases; docs/ARCHITECTURE.md, Leases), UNAUTHENTICATED, for development; with --tls-client-ca-file clients holding a verified certificate may without it; grants need --leases",
		"pprof":                              "serve Go profiles at /debug/pprof/ on the HTTP address, for operators profiling a node",
	} {
		b := boolString("false")
		if name == "leases" {
			b = "true"
		}
		raw[name] = (*string)(&b)
		fs.Var(&b, name, usage+" (env "+envName(name)+")")
	}
}

// usage prints the command's usage and its flags.
func usage(fs *flag.FlagSet, out io.Writer, name string) {
	fmt.Fprintf(out, "Usage: %[1]s [flags]                  (run a node)\n"+
		"       %[1]s check [flags]            (a one-off check against a server; see %[1]s check -h)\n"+
		"       %[1]s inspect key|match [flags] (a key's state, or the rule descriptors match, without counting)\n"+
		"       %[1]s config check FILE|DIR…   (validate rules files without a server)\n"+
		"       %[1]s version | --version      (print the version)\n"+
		"\nEvery flag can also be set by its environment variable. The subcommands name\n"+
		"the node they ask with -server (or SHARDLIMITER_SERVER).\n\nFlags:\n", name)
	fs.PrintDefaults()
}

// parseConfig parses args, then fills every flag not given on the command
// line from its environment variable, then validates.
func parseConfig(args []string, getenv func(string) string, out io.Writer) (config, error) {
	fs, raw := newFlagSet("shardlimiter", out)
	if err := fs.Parse(args); err != nil {
		return config{}, err
	}
	if fs.NArg() > 0 {
		return config{}, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	fromEnv := map[string]bool{}
	for name := range raw {
		if v := getenv(envName(name)); v != "" && !set[name] {
			*raw[name] = v
			fromEnv[name] = true
		}
	}
	return validate(raw, fromEnv)
}

// validate checks the raw values; fromEnv names the flags whose value came
// from their environment variable, so that an error names what the
// operator wrote (SHARDLIMITER_MAX_BATCH, not --max-batch).
func validate(raw map[string]*string, fromEnv map[string]bool) (config, error) {
	p := &flagParser{raw: raw, fromEnv: fromEnv}
	c := config{
		httpAddr:      *raw["http-addr"],
		grpcAddr:      *raw["grpc-addr"],
		peerAddr:      *raw["peer-addr"],
		healthAddr:    *raw["health-addr"],
		gubHTTPAddr:   *raw["gubernator-http-addr"],
		resp:          respConfig{addr: *raw["resp-addr"], passwordFile: *raw["resp-password-file"]},
		gossipAddr:    *raw["gossip-addr"],
		gossipKeyFile: *raw["gossip-key-file"],
		peerTLS:       tlsFiles{cert: *raw["peer-tls-cert-file"], key: *raw["peer-tls-key-file"], ca: *raw["peer-tls-ca-file"]},
		clientTLS:     tlsFiles{cert: *raw["tls-cert-file"], key: *raw["tls-key-file"], ca: *raw["tls-client-ca-file"]},
		advertiseAddr: *raw["advertise-addr"],
		nodeName:      *raw["node-name"],
		logFormat:     *raw["log-format"],
		stateDir:      *raw["state-dir"],
		snapshotName:  *raw["snapshot-name"],
	}
	p.addresses(&c)
	c.maxKeys = p.positiveInt("max-keys")
	c.maxBatch = p.positiveInt("max-batch")
	c.peerInFlight = p.positiveInt("peer-inflight")
	if err := c.logLevel.UnmarshalText([]byte(*raw["log-level"])); err != nil {
		p.bad("log-level", "want debug, info, warn or error, got %q", *raw["log-level"])
	}
	if c.logFormat != "text" && c.logFormat != "json" {
		p.bad("log-format", "want text or json, got %q", c.logFormat)
	}
	var err error
	if c.failPolicy, err = peer.ParseFailPolicy(*raw["fail-policy"]); err != nil {
		p.bad("fail-policy", "want local, open or closed, got %q", *raw["fail-policy"])
	}
	c.shutdownGrace = p.duration("shutdown-grace", false, "a duration like 5s")
	c.peerTimeout = p.duration("peer-timeout", true, "a positive duration like 1s")
	c.replication = p.duration("replication-interval", false, "a duration like 100ms, or 0 for off")
	c.handoff = p.duration("handoff-timeout", true, "a positive duration like 5s")
	c.snapshotEvery = p.duration("snapshot-interval", true, "a positive duration like 10s")
	c.probeInterval = p.duration("gossip-probe-interval", true, "a duration like 500ms")
	if c.probeInterval != 0 && (c.probeInterval < gossip.MinProbeInterval || c.probeInterval > gossip.MaxProbeInterval) {
		p.bad("gossip-probe-interval", "want %v to %v, got %q", gossip.MinProbeInterval, gossip.MaxProbeInterval, *raw["gossip-probe-interval"])
	}
	c.resp.maxConns = p.positiveInt("resp-max-conns")
	c.resp.idleTimeout = p.duration("resp-idle-timeout", true, "a positive duration like 5m")
	p.tls(c)
	c.rls = parseRLS(raw, p.bad)
	c.rls.rlqsInterval = p.duration("rlqs-report-interval", true, "a positive duration like 5s")
	c.rls.rlqsMaxStreams = p.positiveInt("rlqs-max-streams")
	c.metricsMaxRules = p.positiveInt("metrics-max-rules")
	if c.metricsMaxDetailed, err = strconv.Atoi(*raw["metrics-max-detailed"]); err != nil || c.metricsMaxDetailed < 0 {
		p.bad("metrics-max-detailed", "want 0 or a positive integer, got %q", *raw["metrics-max-detailed"])
	}
	c.rls.maxDetailed = c.metricsMaxDetailed
	c.pprof, c.leases, c.clientLeases = p.boolean("pprof"), p.boolean("leases"), p.boolean("client-leases")
	if c.leaseRate, err = strconv.ParseFloat(*raw["lease-threshold"], 64); err != nil || !(c.leaseRate > 0) || math.IsInf(c.leaseRate, 0) {
		p.bad("lease-threshold", "want a positive number of checks per second, got %q", *raw["lease-threshold"])
	}
	validateLimits(raw, &c, p.bad)
	return c, errors.Join(p.errs...)
}

// flagParser reads the raw flag values into typed ones, keeping one error
// per bad flag, named as the user gave it (flag or environment variable).
type flagParser struct {
	raw     map[string]*string
	fromEnv map[string]bool
	errs    []error
}

func (p *flagParser) bad(name, format string, a ...any) {
	where := "--" + name
	if p.fromEnv[name] {
		where = envName(name)
	}
	p.errs = append(p.errs, fmt.Errorf("%s: %s", where, fmt.Sprintf(format, a...)))
}

// positiveInt reads an integer > 0.
func (p *flagParser) boolean(name string) bool {
	b, err := strconv.ParseBool(*p.raw[name])
	if err != nil {
		p.bad(name, "want true or false, got %q", *p.raw[name])
	}
	return b
}

func (p *flagParser) positiveInt(name string) int {
	n, err := strconv.Atoi(*p.raw[name])
	if err != nil || n <= 0 {
		p.bad(name, "want a positive integer, got %q", *p.raw[name])
	}
	return n
}

// duration reads a duration ≥ 0, or > 0 when positive; want describes it.
func (p *flagParser) duration(name string, positive bool, want string) time.Duration {
	d, err := time.ParseDuration(*p.raw[name])
	if err != nil || d < 0 || (positive && d == 0) {
		p.bad(name, "want %s, got %q", want, *p.raw[name])
	}
	return d
}

// addresses checks the listen addresses (the peer port defaults to the
// gRPC port's next), the advertised host and the seeds.
func (p *flagParser) addresses(c *config) {
	if c.peerAddr == "" {
		c.peerAddr = defaultPeerAddr(c.grpcAddr)
		*p.raw["peer-addr"] = c.peerAddr
	}
	addrs := []string{"http-addr", "grpc-addr", "peer-addr", "gossip-addr"}
	if c.healthAddr != "" {
		addrs = append(addrs, "health-addr")
	}
	if c.gubHTTPAddr != "" {
		addrs = append(addrs, "gubernator-http-addr")
	}
	if c.resp.addr != "" {
		addrs = append(addrs, "resp-addr")
	}
	for _, name := range addrs {
		if _, port, err := net.SplitHostPort(*p.raw[name]); err != nil {
			p.bad(name, "want host:port, got %q", *p.raw[name])
		} else if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
			p.bad(name, "bad port %q", port)
		}
	}
	if a := c.advertiseAddr; a != "" && strings.ContainsAny(a, " /") {
		p.bad("advertise-addr", "want a host or IP, got %q", a)
	}
	for _, s := range strings.Split(*p.raw["join"], ",") {
		if s = strings.TrimSpace(s); s != "" {
			c.join = append(c.join, s)
		}
	}
}

// tls checks that the TLS files come in complete sets.
func (p *flagParser) tls(c config) {
	if t := c.peerTLS; t != (tlsFiles{}) && (t.cert == "" || t.key == "" || t.ca == "") {
		p.bad("peer-tls-cert-file", "peer mTLS needs all three of --peer-tls-cert-file, --peer-tls-key-file and --peer-tls-ca-file")
	}
	if t := c.clientTLS; (t.cert == "") != (t.key == "") {
		p.bad("tls-cert-file", "TLS needs both --tls-cert-file and --tls-key-file")
	} else if t.ca != "" && t.cert == "" {
		p.bad("tls-client-ca-file", "client certificates need TLS: set --tls-cert-file and --tls-key-file too")
	}
}

// defaultPeerPort is the port of the peer listener when --peer-addr is not
// set.
const defaultPeerPort = "8082"

// defaultPeerAddr is the peer listener of a node whose --peer-addr is not
// set: the host of its gRPC address, port 8082. Several nodes started on
// one machine with distinct hosts (127.0.0.2, 127.0.0.3, …) and only their
// other addresses given then listen apart, as the advertised addresses
// already were. A gRPC address that does not parse is reported by validate.
func defaultPeerAddr(grpcAddr string) string {
	host, _, err := net.SplitHostPort(grpcAddr)
	if err != nil {
		host = ""
	}
	return net.JoinHostPort(host, defaultPeerPort)
}

// newLogger builds the process logger (stderr).
func newLogger(c config, w io.Writer) *slog.Logger {
	opts := &slog.HandlerOptions{Level: c.logLevel}
	if c.logFormat == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

// advertiseHost returns the host peers use to reach this node: the flag,
// else a specific listen host, else the first non-loopback IPv4 address,
// else loopback.
func advertiseHost(c config) string {
	if a := c.advertiseAddr; a != "" {
		// Gossip also accepts "host:port" and "[v6]": peers dial gRPC at
		// the host alone, with the gRPC port.
		if host, _, err := net.SplitHostPort(a); err == nil {
			return host
		}
		return strings.TrimSuffix(strings.TrimPrefix(a, "["), "]")
	}
	if host, _, _ := net.SplitHostPort(c.gossipAddr); host != "" && !net.ParseIP(host).IsUnspecified() {
		return host
	}
	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		if ipn, ok := a.(*net.IPNet); ok && ipn.IP.To4() != nil && !ipn.IP.IsLoopback() {
			return ipn.IP.String()
		}
	}
	return "127.0.0.1"
}

// defaultNodeName derives a name that is unique per host and gossip port,
// so several nodes can share a host.
func defaultNodeName(host string, gossipPort int) string {
	h, err := os.Hostname()
	if err != nil || h == "" {
		h = "node"
	}
	return fmt.Sprintf("%s-%s-%d", h, host, gossipPort)
}

// tlsFiles names the PEM files of one TLS setting; all empty means off.
type tlsFiles struct{ cert, key, ca string }

// boolString is a boolean flag (--pprof alone means true) kept as a string
// so that it is validated with the environment like every other flag.
type boolString string

func (b *boolString) String() string     { return string(*b) }
func (b *boolString) Set(v string) error { *b = boolString(v); return nil }
func (b *boolString) IsBoolFlag() bool   { return true }
