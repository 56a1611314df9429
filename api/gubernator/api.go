// Package gubernator implements gubernator's API, pb.gubernator.V1
// (proto/gubernator/gubernator.proto, generated into gubpb): GetRateLimits,
// HealthCheck and LiveCheck over gRPC, registered on the client listener
// beside shardlimiter's own API, and its HTTP gateway (gateway.go). Each
// RateLimitReq becomes a limit.Check of the gubernator algorithms (the
// leaf package gubernator at the top of the tree decides them), which the
// node routes, forwards and moves like any other; the answers go back with
// gubernator's fields, error texts and metadata. docs/GUBERNATOR.md lists
// what differs on purpose.
package gubernator

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/shardlimiter/shardlimiter/api/gubernator/gubpb"
	"github.com/shardlimiter/shardlimiter/limit"
	"github.com/shardlimiter/shardlimiter/transport"
	"github.com/shardlimiter/shardlimiter/transport/server"
	"github.com/shardlimiter/shardlimiter/transport/wire"
)

// MaxBatch is gubernator's bound on the items of one call; more
// fails the call with OUT_OF_RANGE, as gubernator does.
const MaxBatch = 1000

// ServiceName is the service, as registered and as health and
// reflection report it.
const ServiceName = "pb.gubernator.V1"

// Gubernator behavior flags (gubernator.proto). BATCHING, NO_BATCHING,
// GLOBAL and MULTI_REGION change nothing here: every check is decided
// exactly by its key's owner.
const (
	gubGregorian      = int32(gubpb.Behavior_DURATION_IS_GREGORIAN)
	gubResetRemaining = int32(gubpb.Behavior_RESET_REMAINING)
	gubDrainOverLimit = int32(gubpb.Behavior_DRAIN_OVER_LIMIT)
)

// Health is what HealthCheck reports of the node.
type Health struct {
	// Healthy: the node is on its ring and answers checks. When false,
	// HealthCheck fails with Unavailable and Message, as gubernator's does.
	Healthy bool
	Message string
	// Self is this node's client gRPC address; Peers the client gRPC
	// addresses of every member, this node included.
	Self  string
	Peers []string
}

// Config configures gubernator's API.
type Config struct {
	// Checker decides the checks (the node).
	Checker transport.Checker
	// Self is the node's name: an answer decided by another node names that
	// node's address in metadata["owner"], as gubernator does for a
	// forwarded check.
	Self string
	// OwnerAddr returns the client gRPC address of a member by name ("" when
	// unknown: the name itself is reported).
	OwnerAddr func(name string) string
	// Health reports the node for HealthCheck; nil reports healthy, alone.
	Health func() Health
	// Closing reports that the node is shutting down: LiveCheck then fails
	// with Unavailable, as gubernator's does. Nil: never.
	Closing func() bool
}

// API serves gubernator's API. Its methods are safe for concurrent use.
type API struct {
	gubpb.UnimplementedV1Server
	cfg     Config
	metrics *server.Metrics
	acquire func(units int) (server.Held, error) // the client listener's bound
	calls   *server.Calls
}

// Register registers gubernator's V1 on the client listener l: its calls
// take units of l's bound, as RateLimiter's do, and are counted under api
// gubernator_grpc. The returned API also serves the HTTP gateway
// ([API.Gateway]).
func Register(l *server.Listener, cfg Config) *API {
	g := &API{cfg: cfg, metrics: l.Metrics(), acquire: l.Acquire,
		calls: l.Metrics().Calls("gubernator_grpc", "GetRateLimits", false)}
	gubpb.RegisterV1Server(l, g)
	return g
}

// GetRateLimits answers a batch, as gubernator's V1.GetRateLimits.
func (g *API) GetRateLimits(ctx context.Context, req *gubpb.GetRateLimitsReq) (*gubpb.GetRateLimitsResp, error) {
	start := time.Now()
	resp, err := g.getRateLimits(ctx, req, g.acquire)
	g.calls.ObserveGRPC(transport.Code(err), len(req.GetRequests()), time.Since(start))
	if err != nil {
		return nil, gubernatorStatus(err)
	}
	return resp, nil
}

// gubernatorStatus is the status a failed call answers: its own when it
// has one (gubernator's refusals), else transport.GRPCError's.
func gubernatorStatus(err error) error {
	if _, ok := status.FromError(err); ok {
		return err
	}
	return transport.GRPCError(err)
}

// errGubernatorBatch is gubernator's refusal of a batch over its bound.
var errGubernatorBatch = status.Errorf(codes.OutOfRange,
	"Requests.RateLimits list too large; max size is '%d'", MaxBatch)

// getRateLimits answers a batch under the bound of acquire (the gRPC or
// the HTTP listener's, which count its refusals).
func (g *API) getRateLimits(ctx context.Context, req *gubpb.GetRateLimitsReq, acquire func(int) (server.Held, error)) (*gubpb.GetRateLimitsResp, error) {
	items := req.GetRequests()
	if len(items) > MaxBatch {
		return nil, errGubernatorBatch
	}
	held, err := acquire(len(items))
	if err != nil {
		return nil, err
	}
	defer held.Release()
	// The answers are one array, each pointed at once: one allocation per
	// batch, not one per item.
	resps := make([]gubpb.RateLimitResp, len(items))
	out := make([]*gubpb.RateLimitResp, len(items))
	for i := range resps {
		out[i] = &resps[i]
	}
	checks := make([]limit.Check, 0, len(items))
	idx := make([]int, 0, len(items))
	var t server.Tally
	for i, r := range items {
		c, err := gubernatorCheck(r)
		if err != nil {
			out[i].Error = err.Error()
			t.Item(c.Rule.Algorithm, c.Hits, &limit.Result{Error: err.Error(), Reason: limit.Invalid})
			continue
		}
		checks, idx = append(checks, c), append(idx, i)
	}
	if len(checks) > 0 {
		if g.cfg.Checker == nil {
			return nil, fmt.Errorf("transport: no checker configured: %w", transport.ErrUnavailable)
		}
		results, err := g.cfg.Checker.Check(ctx, checks)
		if err != nil {
			return nil, err
		}
		if len(results) != len(checks) {
			return nil, fmt.Errorf("transport: checker answered %d of %d checks", len(results), len(checks))
		}
		var owners ownerMetadata
		for j, i := range idx {
			g.response(out[i], &results[j], &checks[j], &owners)
			t.Item(checks[j].Rule.Algorithm, checks[j].Hits, &results[j])
		}
	}
	g.metrics.Add(&t)
	return &gubpb.GetRateLimitsResp{Responses: out}, nil
}

// gubernatorCheck converts one item, checking what gubernator checks, in
// its order and with its texts; limit.Check.Validate (on the node) checks
// the rest.
func gubernatorCheck(r *gubpb.RateLimitReq) (limit.Check, error) {
	c := limit.Check{Name: r.GetName(), Key: r.GetUniqueKey(), Hits: r.GetHits()}
	switch r.GetAlgorithm() {
	case gubpb.Algorithm_TOKEN_BUCKET:
		c.Rule.Algorithm = limit.GubernatorTokenBucket
	case gubpb.Algorithm_LEAKY_BUCKET:
		c.Rule.Algorithm = limit.GubernatorLeakyBucket
	default:
		c.Rule.Algorithm = wire.UnknownAlgorithm
	}
	switch {
	case c.Key == "":
		return c, errors.New("field 'unique_key' cannot be empty")
	case c.Name == "":
		return c, errors.New("field 'namespace' cannot be empty")
	case c.Rule.Algorithm == wire.UnknownAlgorithm:
		return c, itemError(&c, "", fmt.Sprintf("Invalid rate limit algorithm '%d'", int32(r.GetAlgorithm())))
	}
	d := r.GetDuration()
	if d < 0 || d > limit.MaxGubernatorDuration.Milliseconds() {
		return c, fmt.Errorf("duration must be in [0, %d], got %d", limit.MaxGubernatorDuration.Milliseconds(), d)
	}
	c.Rule.Limit, c.Rule.Period, c.Rule.Burst = r.GetLimit(), time.Duration(d)*time.Millisecond, r.GetBurst()
	b := int32(r.GetBehavior())
	if b&gubGregorian != 0 {
		c.Rule.Behavior |= limit.Gregorian
	}
	if b&gubResetRemaining != 0 {
		c.Rule.Behavior |= limit.Reset
	}
	if b&gubDrainOverLimit != 0 {
		c.Rule.Behavior |= limit.DrainOverLimit
	}
	c.Rule.CreatedAt = r.GetCreatedAt()
	return c, nil
}

// itemError is an item error of the algorithms as gubernator words
// it when the node called owns the key: wrapped with the key (name_key),
// the worker pool's step and, for an algorithm's own error, its name.
func itemError(c *limit.Check, algorithm, msg string) error {
	if algorithm != "" {
		msg = "Error in " + algorithm + ": " + msg
	}
	//lint:ignore ST1005 gubernator's own text, word for word: its clients see it
	return fmt.Errorf("Error while apply rate limit for '%s_%s': during workerPool.GetRateLimit: %s", c.Name, c.Key, msg)
}

// ownerMetadata is the metadata of the answers a batch's owners decided,
// one map per owner, shared by its answers (nothing writes to them once
// made; the response is only encoded).
type ownerMetadata struct {
	names []string
	maps  []map[string]string
}

func (o *ownerMetadata) of(owner string, addr func(name string) string) map[string]string {
	for i, n := range o.names {
		if n == owner {
			return o.maps[i]
		}
	}
	m := map[string]string{"owner": addr(owner)}
	o.names, o.maps = append(o.names, owner), append(o.maps, m)
	return m
}

// ownerAddr is the client address gubernator's metadata names for the
// member called name: its gRPC address when known, else the name.
func (g *API) ownerAddr(name string) string {
	if g.cfg.OwnerAddr != nil {
		if a := g.cfg.OwnerAddr(name); a != "" {
			return a
		}
	}
	return name
}

// response writes into out the RateLimitResp of the result of c; owners
// holds the batch's metadata maps.
func (g *API) response(out *gubpb.RateLimitResp, r *limit.Result, c *limit.Check, owners *ownerMetadata) {
	if r.Error != "" {
		msg := r.Error
		if msg == limit.ErrGregorianWeeks.Error() || msg == limit.ErrGregorianUnit.Error() {
			algorithm := "tokenBucket"
			if c.Rule.Algorithm == limit.GubernatorLeakyBucket {
				algorithm = "leakyBucket"
			}
			msg = itemError(c, algorithm, msg).Error()
		}
		out.Error = msg
		return
	}
	out.Limit, out.Remaining, out.ResetTime = c.Rule.Limit, r.Remaining, r.ResetAt/int64(time.Millisecond)
	if !r.Allowed {
		out.Status = gubpb.Status_OVER_LIMIT
	}
	if r.Owner != "" && r.Owner != g.cfg.Self {
		out.Metadata = owners.of(r.Owner, g.ownerAddr)
	}
}

// HealthCheck reports the node and its peers, as gubernator's does: an
// unhealthy node fails the call with Unavailable.
func (g *API) HealthCheck(context.Context, *gubpb.HealthCheckReq) (*gubpb.HealthCheckResp, error) {
	h := Health{Healthy: true}
	if g.cfg.Health != nil {
		h = g.cfg.Health()
	}
	if !h.Healthy {
		return nil, status.Error(codes.Unavailable, h.Message)
	}
	resp := &gubpb.HealthCheckResp{Status: "healthy", PeerCount: int32(len(h.Peers)), AdvertiseAddress: h.Self,
		LocalPeers: make([]*gubpb.PeerHealthResp, 0, len(h.Peers)), RegionPeers: []*gubpb.PeerHealthResp{}}
	for _, p := range h.Peers {
		resp.LocalPeers = append(resp.LocalPeers, &gubpb.PeerHealthResp{GrpcAddress: p})
	}
	return resp, nil
}

// LiveCheck answers while the node serves, and fails with Unavailable
// once it is shutting down.
func (g *API) LiveCheck(context.Context, *gubpb.LiveCheckReq) (*gubpb.LiveCheckResp, error) {
	if g.cfg.Closing != nil && g.cfg.Closing() {
		return nil, status.Error(codes.Unavailable, "server is shutting down")
	}
	return &gubpb.LiveCheckResp{}, nil
}
