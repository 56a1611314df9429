// Package rls implements Envoy's global rate-limit service,
// envoy.service.ratelimit.v3.RateLimitService, on top of a shardlimiter
// node and the rules of package rules.
//
// # Model
//
// Envoy sends a domain and a list of descriptors, each a list of key/value
// entries. Each descriptor is matched against the loaded rules (rules.Set);
// a descriptor that matches becomes one limit.Check per limit of its rule,
// all under the rule's unique key (rules.Match.Key), so that the ring
// routes on the domain and the entries and every counter has exactly one
// owner. The checks of a whole request go to the node's Checker as one
// batch: checks owned elsewhere are forwarded with the node's usual
// batching. A rule with several limits (rate_limits) sends them as one
// all-or-nothing group (limit.Check.Chained): the owner admits the
// descriptor only when every limit admits, and counts it only then.
//
// Answers follow Envoy and envoyproxy/ratelimit: every hit counts, past
// the limit (limit.Overdraft; Config.StopIncrementWhenOverLimit counts
// admitted hits only), and a descriptor is OVER_LIMIT when its count after
// its hits is over the limit, with limit_remaining 0; a hits_addend of 0
// counts nothing and is OVER_LIMIT only when the count already is.
// overall_code is OVER_LIMIT when any descriptor is; a descriptor with no
// rule, or whose domain is unknown, answers OK with no current_limit; an
// unlimited rule answers OK with limit_remaining 2^32-1; a rule in shadow
// mode, and every rule when the node is in shadow mode, is counted but
// always answers OK. The differences are in docs/ENVOY.md; one is that
// is_negative_hits is treated as a check that counts nothing.
//
// Proto types stay in this package: the node sees limit.Check and
// limit.Result only.
//
// # Concurrency
//
// A Service is safe for concurrent use. It reads the current rules once
// per request (rules.Store.Load), so a reload never splits a request.
package rls

import (
	"context"
	"time"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/shardlimiter/shardlimiter/rules"
	"github.com/shardlimiter/shardlimiter/transport"
	"github.com/shardlimiter/shardlimiter/transport/server"
)

// Config configures a Service.
type Config struct {
	// Checker decides the checks of a request: the node (peer.Node.Check),
	// which forwards the keys it does not own, usually behind the client
	// in-flight bound (server.BoundChecker): a refusal for overload
	// fails the call with ResourceExhausted and a retry delay. Required.
	Checker transport.Checker
	// JSONChecker decides the checks of POST /json (so that its refusals
	// are counted for the HTTP listener); nil means Checker.
	JSONChecker transport.Checker
	// BodyBytes bounds the request-body bytes being read at once on the
	// node: the HTTP listener's bound (server.HTTPConfig.BodyBytes), which
	// POST /json bodies share. A body that does not fit is answered 429
	// with Retry-After before any check. Nil means no bound.
	BodyBytes *server.InFlight
	// Telemetry counts the POST /json bodies refused for BodyBytes, as
	// the HTTP listener's sheds; nil counts nothing.
	Telemetry *server.Metrics
	// Rules holds the loaded rules. Nil, or a store holding no set, matches
	// nothing: every descriptor answers OK.
	Rules *rules.Store
	// Shadow puts the whole node in shadow mode: descriptors are counted
	// and reported in metrics, and overall_code is always OK.
	Shadow bool
	// StopIncrementWhenOverLimit is envoyproxy/ratelimit's
	// STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=true: when a descriptor of a
	// request goes over its limit, the other descriptors of the request
	// count nothing (see stopWhenOver). Every hit of a descriptor that
	// counts still counts, past the limit (limit.Overdraft): a descriptor
	// is over the limit when its count after adding its hits is, and a
	// hits_addend of 0 is over only when the count already is.
	StopIncrementWhenOverLimit bool
	// Headers adds rate-limit header fields for the descriptor closest to
	// its limit to response_headers_to_add, in HeadersFormat.
	Headers bool
	// HeadersFormat chooses the header fields: HeadersIETF (the zero
	// value) or HeadersRateLimit.
	HeadersFormat HeadersFormat
	// HeaderNames names the three fields of HeadersRateLimit; an empty
	// name is envoyproxy/ratelimit's default (RateLimit-Limit,
	// RateLimit-Remaining, RateLimit-Reset).
	HeaderNames HeaderNames
	// DynamicMetadata sets the response's dynamic_metadata as
	// envoyproxy/ratelimit does with RESPONSE_DYNAMIC_METADATA=true: the
	// domain, the descriptors, the request's hitsAddend, and the merged
	// metadata of the descriptors that passed (see metadata.go).
	DynamicMetadata bool
	// MetricsMaxDetailed bounds the series of detailed_metric rules (their
	// statistics per descriptor value, rulemetrics.go); past it their
	// values are counted under the rule's name. 0 ignores detailed_metric.
	MetricsMaxDetailed int
	// Registerer receives the service's metrics; nil registers nothing.
	Registerer prometheus.Registerer
	// Now reads the clock for duration_until_reset; nil means time.Now.
	Now func() time.Time
}

// Service answers ShouldRateLimit. Its methods are safe for concurrent use.
type Service struct {
	rlspb.UnimplementedRateLimitServiceServer
	cfg Config
	m   *metrics
	rm  *ruleMetrics
}

// New returns a Service; it starts nothing.
func New(cfg Config) *Service {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.JSONChecker == nil {
		cfg.JSONChecker = cfg.Checker
	}
	cfg.HeaderNames = cfg.HeaderNames.orDefault()
	s := &Service{cfg: cfg, m: newMetrics(cfg.Registerer), rm: newRuleMetrics(cfg.Rules, cfg.MetricsMaxDetailed)}
	if cfg.Registerer != nil {
		cfg.Registerer.MustRegister(s.rm.collectors()...)
	}
	return s
}

// ShouldRateLimitMethod is the full gRPC name of ShouldRateLimit.
const ShouldRateLimitMethod = rlspb.RateLimitService_ShouldRateLimit_FullMethodName

// Register registers the service on the client listener l. Its calls take
// units of the client in-flight bound (through Checker), so the listener
// refuses them at their headers while that bound is full.
func (s *Service) Register(l *server.Listener) {
	l.Register(&rlspb.RateLimitService_ServiceDesc, s, server.Shed("ShouldRateLimit"))
}

// RegisterHTTP registers POST /json (JSONHandler), GET /v1/config
// (ConfigHandler) and POST /v1/config/match (MatchHandler) on the HTTP
// listener h.
func (s *Service) RegisterHTTP(h *server.HTTP) {
	h.Handle("/json", s.JSONHandler())
	h.Handle("/v1/config", ConfigHandler(s.cfg.Rules))
	h.Handle("/v1/config/match", MatchHandler(s.cfg.Rules))
}

// ShouldRateLimit answers one request: one status per descriptor, in order.
// A malformed request (no domain, no descriptor) fails with
// InvalidArgument; an item the node could not decide fails the call (see
// callError), so that Envoy applies its failure_mode_deny setting.
func (s *Service) ShouldRateLimit(ctx context.Context, req *rlspb.RateLimitRequest) (*rlspb.RateLimitResponse, error) {
	return s.should(ctx, req, s.cfg.Checker)
}

// should is ShouldRateLimit deciding through checker.
func (s *Service) should(ctx context.Context, req *rlspb.RateLimitRequest, checker transport.Checker) (*rlspb.RateLimitResponse, error) {
	s.m.requests.Inc()
	if err := validRequest(req); err != nil {
		s.m.errors.Inc()
		return nil, err
	}
	var set *rules.Set
	if s.cfg.Rules != nil {
		set = s.cfg.Rules.Load()
	}
	p := plan(set, req)
	var results = p.results[:0]
	if len(p.checks) > 0 {
		var err error
		if s.cfg.StopIncrementWhenOverLimit && p.counted() > 1 {
			results, err = stopWhenOver(ctx, checker, p)
		} else {
			results, err = decideAll(ctx, checker, p.checks)
		}
		if err != nil {
			s.m.errors.Inc()
			return nil, callError(err)
		}
	}
	resp := s.answer(p, results)
	if s.cfg.DynamicMetadata {
		resp.DynamicMetadata = dynamicMetadata(req, p, resp)
	}
	return resp, nil
}
