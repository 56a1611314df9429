package main

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/net/http/httpguts"

	"github.com/shardlimiter/shardlimiter/rls"
	"github.com/shardlimiter/shardlimiter/rules"
	"github.com/shardlimiter/shardlimiter/rules/rulesfile"
	"github.com/shardlimiter/shardlimiter/transport"
	tserver "github.com/shardlimiter/shardlimiter/transport/server"
)

// rlsConfig is the command line of the rules and of Envoy's rate-limit
// service (--config, --shadow-mode, --rls-*).
type rlsConfig struct {
	files         []string // rules files or directories; none: no rules
	shadow        bool
	headers       bool
	headersFormat rls.HeadersFormat
	headerNames   rls.HeaderNames
	stopIncrement bool
	metadata      bool
	maxDetailed   int // --metrics-max-detailed (validated with the metrics flags)
	// Envoy's quota service (rlqs.go).
	rlqsInterval   time.Duration
	rlqsMaxStreams int
}

// parseRLS validates the rules flags.
func parseRLS(raw map[string]*string, bad func(name, format string, a ...any)) rlsConfig {
	var c rlsConfig
	for _, f := range strings.Split(*raw["config"], ",") {
		if f = strings.TrimSpace(f); f != "" {
			c.files = append(c.files, f)
		}
	}
	var err error
	if c.shadow, err = strconv.ParseBool(*raw["shadow-mode"]); err != nil {
		bad("shadow-mode", "want true or false, got %q", *raw["shadow-mode"])
	}
	for name, b := range map[string]*bool{"rls-headers": &c.headers, "rls-stop-increment-when-over-limit": &c.stopIncrement, "rls-dynamic-metadata": &c.metadata} {
		if *b, err = strconv.ParseBool(*raw[name]); err != nil {
			bad(name, "want true or false, got %q", *raw[name])
		}
	}
	if c.headersFormat, err = rls.ParseHeadersFormat(*raw["rls-headers-format"]); err != nil {
		bad("rls-headers-format", "%v", err)
	}
	c.headerNames = rls.HeaderNames{Limit: *raw["rls-header-limit"], Remaining: *raw["rls-header-remaining"], Reset: *raw["rls-header-reset"]}
	for name, v := range map[string]string{"rls-header-limit": c.headerNames.Limit, "rls-header-remaining": c.headerNames.Remaining, "rls-header-reset": c.headerNames.Reset} {
		if !httpguts.ValidHeaderFieldName(v) {
			bad(name, "%q is not an HTTP header name", v)
		}
	}
	return c
}

// noRulesWarning is logged at the start of a node without --config: its
// Envoy rate-limit service has no rule to match, and a caller would
// otherwise learn it only from being admitted every time.
const noRulesWarning = "no --config: the Envoy rate-limit service (ShouldRateLimit, POST /json) answers OK to every descriptor, and native checks must carry their own limit and duration_ms; load rules files with --config (docs/RULES.md)"

// rulesReload is how often the rules files are read for changes: a new
// file applies within about this long.
const rulesReload = 500 * time.Millisecond

// rlsServer is the rules, their reloading, and the Envoy rate-limit
// service of one node.
type rlsServer struct {
	cfg     rlsConfig
	log     *slog.Logger
	store   *rules.Store
	svc     *rls.Service
	loaded  prometheus.Counter
	refused prometheus.Counter
	at      atomic.Int64 // when the rules in force were loaded, Unix s
}

func (r *rlsServer) loadedAt() float64 {
	if len(r.cfg.files) == 0 {
		return 0
	}
	return float64(r.at.Load())
}

// newRLS loads the rules (a broken file stops the start) and builds the
// service on checker, the node, behind b.client, the client calls'
// in-flight bound: a call takes one unit per check, and is refused (shed,
// counted) when they do not fit, as the native API's calls are. The
// bodies of POST /json count against b.body, the HTTP listener's
// body-bytes bound.
func newRLS(cfg rlsConfig, checker transport.Checker, b bounds, reg prometheus.Registerer, log *slog.Logger) (*rlsServer, error) {
	r := &rlsServer{cfg: cfg, log: log, store: rules.NewStore(nil)}
	if len(cfg.files) > 0 {
		set, err := rules.Load(cfg.files...)
		if err != nil {
			return nil, fmt.Errorf("--config: %w", err)
		}
		r.store.Swap(set)
		log.Info("rules loaded", "files", cfg.files, "version", set.Version())
	} else {
		log.Warn(noRulesWarning)
	}
	r.loaded = prometheus.NewCounter(prometheus.CounterOpts{Namespace: "shardlimiter", Subsystem: "rules", Name: "reloads_total",
		Help: "Rules files reloaded after a change and applied."})
	r.refused = prometheus.NewCounter(prometheus.CounterOpts{Namespace: "shardlimiter", Subsystem: "rules", Name: "reload_errors_total",
		Help: "Rules files changed but refused (invalid): the last good rules stay in force; the log names the file and line."})
	version := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "shardlimiter", Subsystem: "rules", Name: "loaded_timestamp_seconds",
		Help: "When the rules in force were loaded (Unix time); 0 without --config."}, r.loadedAt)
	reg.MustRegister(r.loaded, r.refused, version)
	r.svc = rls.New(rls.Config{
		Checker:     tserver.BoundChecker(checker, b.client, b.listeners, tserver.ListenerGRPC),
		JSONChecker: tserver.BoundChecker(checker, b.client, b.listeners, tserver.ListenerHTTP),
		BodyBytes:   b.body,
		Telemetry:   b.listeners,
		Rules:       r.store, Shadow: cfg.shadow, Registerer: reg,
		Headers: cfg.headers, HeadersFormat: cfg.headersFormat, HeaderNames: cfg.headerNames,
		StopIncrementWhenOverLimit: cfg.stopIncrement, DynamicMetadata: cfg.metadata,
		MetricsMaxDetailed: cfg.maxDetailed,
	})
	r.at.Store(time.Now().Unix())
	return r, nil
}

// checker is the client API's Checker: items that name a rule take it.
func (r *rlsServer) checker(next transport.Checker) transport.Checker {
	return rules.ByName{Rules: r.store, Next: next}
}

// run reloads the rules when their files change until ctx is done
// (rulesfile.WatchEvery: by content, so that a ConfigMap's symlink swap
// and a key added to a mounted directory are seen). A file that does not
// load is refused with a log line and a metric; the last good rules stay
// and the node stays ready.
func (r *rlsServer) run(ctx context.Context) {
	if len(r.cfg.files) == 0 {
		return
	}
	previous := r.store.Load().Version()
	rulesfile.WatchEvery(ctx, rulesReload, r.cfg.files, r.store, func(version string, err error) {
		if err != nil {
			r.refused.Inc()
			r.log.Error("rules reload refused; the last good rules stay in force", "version", version, "err", err)
			return
		}
		r.at.Store(time.Now().Unix())
		r.loaded.Inc()
		r.log.Info("rules reloaded", "version", version, "previous", previous)
		previous = version
	})
}
