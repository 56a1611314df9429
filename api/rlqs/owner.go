package rlqs

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/shardlimiter/shardlimiter/quota"
	"github.com/shardlimiter/shardlimiter/rules"
)

// The peer-port method: the node of a stream sends the owner of some of
// its buckets one report of one instance, restricted to those buckets,
// as Envoy's own message (RateLimitQuotaUsageReports, with the domain),
// and the instance's name in the metadata; the owner answers one bucket
// action per bucket, in order (an action without bucket_action when the
// bucket gets no assignment). The owner matches the rules itself and
// never forwards again.
const (
	// QuotaService is the peer service's name.
	QuotaService = "shardlimiter.v1.Quota"
	// ReportMethod is its only method's full name.
	ReportMethod = "/" + QuotaService + "/Report"
	// instanceKey is the metadata key of the reporting instance's name.
	instanceKey = "x-shardlimiter-rlqs-instance"
	// retryKey is the answer's header of when to ask again, one value
	// per bucket in milliseconds (0: at the next report); see
	// quota.Assignment.Retry.
	retryKey = "x-shardlimiter-rlqs-retry-ms"
)

var quotaServiceDesc = grpc.ServiceDesc{
	ServiceName: QuotaService,
	HandlerType: (*any)(nil),
	Methods:     []grpc.MethodDesc{{MethodName: "Report", Handler: reportHandler}, {MethodName: "Replicate", Handler: replicateHandler}},
	Metadata:    quotaProto, // described to server reflection by descriptor.go
}

func reportHandler(srv any, ctx context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
	in := new(rlqspb.RateLimitQuotaUsageReports)
	if err := dec(in); err != nil {
		return nil, err
	}
	s := srv.(*Service)
	md, _ := metadata.FromIncomingContext(ctx)
	ids := md.Get(instanceKey)
	if len(ids) != 1 || ids[0] == "" || in.GetDomain() == "" {
		return nil, status.Error(codes.InvalidArgument, "rlqs: a quota report needs a domain and one instance name")
	}
	if len(in.GetBucketQuotaUsages()) > s.cfg.MaxBuckets {
		return nil, status.Errorf(codes.ResourceExhausted, "rlqs: %d buckets in one report, max %d", len(in.GetBucketQuotaUsages()), s.cfg.MaxBuckets)
	}
	out := &rlqspb.RateLimitQuotaResponse{}
	now := s.cfg.Now()
	set := s.cfg.Rules.Load()
	retries := make([]string, 0, len(in.GetBucketQuotaUsages()))
	hs := decodeHeld(md.Get(heldKey), len(in.GetBucketQuotaUsages()))
	keys := make([]string, len(in.GetBucketQuotaUsages()))
	for i, u := range in.GetBucketQuotaUsages() {
		if err := s.checkBucket(u.GetBucketId()); err != nil {
			return nil, status.Error(codes.InvalidArgument, err.Error())
		}
		m := set.MatchQuota(in.GetDomain(), u.GetBucketId().GetBucket())
		action, retry := s.decideOwned(now, ids[0], in.GetDomain(), m, u, hs[i])
		if m.Rule != "" && action.GetQuotaAssignmentAction() != nil {
			keys[i] = m.Key
		}
		out.BucketAction = append(out.BucketAction, action)
		retries = append(retries, strconv.FormatInt(retry.Milliseconds(), 10))
	}
	for i, ok := range s.replicateBefore(ctx, now, ids[0], keys) {
		if !ok { // not answered: the instance keeps what it holds, which the backup knows
			out.BucketAction[i] = &rlqspb.RateLimitQuotaResponse_BucketAction{BucketId: in.GetBucketQuotaUsages()[i].GetBucketId()}
		}
	}
	if err := grpc.SetHeader(ctx, metadata.Pairs(append([]string{retryKey}, strings.Join(retries, ","))...)); err != nil {
		return nil, err
	}
	return out, nil
}

// decideOwned reports u of instance on the bucket m, owned here, with
// the assignment h the instance holds of it, and returns the instance's
// action for it and when to ask again (0: at the next report).
func (s *Service) decideOwned(now time.Time, instance, domain string, m rules.QuotaMatch, u *rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage, h held) (*rlqspb.RateLimitQuotaResponse_BucketAction, time.Duration) {
	if m.Rule == "" {
		return defaultAction(u.GetBucketId(), m.Default, s.table.TTL()), 0
	}
	a, err := s.table.Report(now, quota.Report{
		Key: m.Key, Group: group(domain, m.Rule), Limit: m.PerSecond, Instance: instance,
		Allowed: u.GetNumRequestsAllowed(), Denied: u.GetNumRequestsDenied(),
		Elapsed: u.GetTimeElapsed().AsDuration(), Held: h.rate, HeldLeft: h.left, Settled: s.settled(now),
		LearnUntil: s.started.Add(s.table.TTL() + quota.Slack),
	})
	if err != nil { // the table is full: this bucket falls back to the default
		s.m.full.Inc()
		return defaultAction(u.GetBucketId(), m.Default, s.table.TTL()), 0
	}
	if a.None { // a learning bucket: the instance holds nothing, gets nothing yet
		return &rlqspb.RateLimitQuotaResponse_BucketAction{BucketId: u.GetBucketId()}, a.Retry
	}
	return assignmentAction(u.GetBucketId(), a), a.Retry
}

// remoteReport sends the usages, with what the instance holds of each
// (hs), to the owner at addr and returns its actions and retries, one
// per usage.
func (s *Service) remoteReport(ctx context.Context, addr, instance, domain string, usages []*rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage, hs []held) ([]*rlqspb.RateLimitQuotaResponse_BucketAction, []time.Duration, error) {
	cc, err := s.owners.conn(addr)
	if err != nil {
		return nil, nil, err
	}
	ctx, cancel := context.WithTimeout(metadata.AppendToOutgoingContext(ctx, instanceKey, instance, heldKey, encodeHeld(hs)), s.cfg.PeerTimeout)
	defer cancel()
	out := new(rlqspb.RateLimitQuotaResponse)
	in := &rlqspb.RateLimitQuotaUsageReports{Domain: domain, BucketQuotaUsages: usages}
	var header metadata.MD
	if err := cc.Invoke(ctx, ReportMethod, in, out, grpc.Header(&header)); err != nil {
		return nil, nil, fmt.Errorf("rlqs: report to the owner %s: %w", addr, err)
	}
	if len(out.GetBucketAction()) != len(usages) {
		return nil, nil, fmt.Errorf("rlqs: the owner %s answered %d actions for %d buckets", addr, len(out.GetBucketAction()), len(usages))
	}
	retries := make([]time.Duration, len(usages))
	if v := header.Get(retryKey); len(v) == 1 {
		for i, ms := range strings.Split(v[0], ",") {
			if n, err := strconv.ParseInt(ms, 10, 64); err == nil && i < len(retries) && n > 0 {
				retries[i] = time.Duration(n) * time.Millisecond
			}
		}
	}
	return out.GetBucketAction(), retries, nil
}

// conn returns the connection to addr, made on first use.
func (o *owners) conn(addr string) (*grpc.ClientConn, error) {
	if addr == "" {
		return nil, errors.New("rlqs: the owner's peer address is unknown")
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	c := o.conns[addr]
	if c == nil {
		opts := append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, o.opts...)
		cc, err := grpc.NewClient(addr, opts...)
		if err != nil {
			return nil, fmt.Errorf("rlqs: dial %s: %w", addr, err)
		}
		c = &ownerConn{cc: cc}
		o.conns[addr] = c
	}
	c.used.Store(time.Now().UnixNano())
	return c.cc, nil
}

// closeIdle closes the connections unused since before.
func (o *owners) closeIdle(before time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for addr, c := range o.conns {
		if c.used.Load() < before.UnixNano() {
			c.cc.Close()
			delete(o.conns, addr)
		}
	}
}

func (o *owners) closeAll() { o.closeIdle(time.Unix(0, 1<<62)) }
