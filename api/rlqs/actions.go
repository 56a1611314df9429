package rlqs

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/shardlimiter/shardlimiter/quota"
	"github.com/shardlimiter/shardlimiter/rules"
)

// assignmentAction is a as Envoy's action: a token bucket, or DENY_ALL
// for a share of 0 (Envoy enforces token_bucket and blanket_rule only).
func assignmentAction(id *rlqspb.BucketId, a quota.Assignment) *rlqspb.RateLimitQuotaResponse_BucketAction {
	strategy := &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_BlanketRule_{BlanketRule: typev3.RateLimitStrategy_DENY_ALL}}
	if a.Tokens > 0 {
		strategy.Strategy = &typev3.RateLimitStrategy_TokenBucket{TokenBucket: &typev3.TokenBucket{
			MaxTokens:     a.Tokens,
			TokensPerFill: wrapperspb.UInt32(a.Tokens),
			FillInterval:  durationpb.New(a.Fill),
		}}
	}
	return assign(id, strategy, a.TTL)
}

// defaultAction is the action of a bucket that gets the domain's default;
// nil strategy for QuotaNone: an action with no bucket_action, which the
// stream does not send.
func defaultAction(id *rlqspb.BucketId, d rules.QuotaDefault, ttl time.Duration) *rlqspb.RateLimitQuotaResponse_BucketAction {
	var rule typev3.RateLimitStrategy_BlanketRule
	switch d {
	case rules.QuotaAllow:
		rule = typev3.RateLimitStrategy_ALLOW_ALL
	case rules.QuotaDeny:
		rule = typev3.RateLimitStrategy_DENY_ALL
	default:
		return &rlqspb.RateLimitQuotaResponse_BucketAction{BucketId: id}
	}
	return assign(id, &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_BlanketRule_{BlanketRule: rule}}, ttl)
}

func assign(id *rlqspb.BucketId, strategy *typev3.RateLimitStrategy, ttl time.Duration) *rlqspb.RateLimitQuotaResponse_BucketAction {
	return &rlqspb.RateLimitQuotaResponse_BucketAction{
		BucketId: id,
		BucketAction: &rlqspb.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction_{
			QuotaAssignmentAction: &rlqspb.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction{
				AssignmentTimeToLive: durationpb.New(ttl),
				RateLimitStrategy:    strategy,
			},
		},
	}
}

func abandonAction(id *rlqspb.BucketId) *rlqspb.RateLimitQuotaResponse_BucketAction {
	return &rlqspb.RateLimitQuotaResponse_BucketAction{
		BucketId: id,
		BucketAction: &rlqspb.RateLimitQuotaResponse_BucketAction_AbandonAction_{
			AbandonAction: &rlqspb.RateLimitQuotaResponse_BucketAction_AbandonAction{},
		},
	}
}

// group is the metrics' name of a domain's rule.
func group(domain, rule string) string { return domain + "\x00" + rule }

// checkBucket validates a bucket_id against the bounds.
func (s *Service) checkBucket(id *rlqspb.BucketId) error {
	b := id.GetBucket()
	switch {
	case len(b) == 0:
		return fmt.Errorf("rlqs: bucket_id is empty: it needs at least one entry")
	case len(b) > s.cfg.MaxEntries:
		return fmt.Errorf("rlqs: bucket_id has %d entries, max %d", len(b), s.cfg.MaxEntries)
	}
	for k, v := range b {
		switch {
		case k == "":
			return fmt.Errorf("rlqs: bucket_id has an entry with an empty key")
		case len(k) > s.cfg.MaxEntryBytes || len(v) > s.cfg.MaxEntryBytes:
			return fmt.Errorf("rlqs: bucket_id entry %.32q is over %d bytes", k, s.cfg.MaxEntryBytes)
		}
	}
	return nil
}

// bucketName is a bucket_id as one string, entries sorted by key and
// length-prefixed: the stream's name of the bucket.
func bucketName(id *rlqspb.BucketId) string {
	b := id.GetBucket()
	keys := make([]string, 0, len(b))
	for k := range b {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var sb strings.Builder
	for _, k := range keys {
		for _, s := range []string{k, b[k]} {
			sb.WriteString(strconv.Itoa(len(s)))
			sb.WriteByte(':')
			sb.WriteString(s)
		}
	}
	return sb.String()
}
