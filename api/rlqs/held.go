package rlqs

import (
	"math"
	"strconv"
	"strings"
	"time"

	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
)

// heldKey is the peer report's header of the assignment the instance
// holds of each bucket, in order: "rate:ms_left" (rate in requests per
// second, the time left of its TTL in milliseconds; "0:0" for none). An
// owner new to a bucket (a join, a restart, a stale replica) learns from
// it the assignments an earlier owner handed out, and counts them until
// they end (quota.Report.Held).
const heldKey = "x-shardlimiter-rlqs-held"

// held is an assignment a stream pushed: its rate and the end of its TTL.
type held struct {
	rate float64
	left time.Duration
}

// heldAt returns what the stream's bucket holds at now: the last
// assignment pushed down the stream, while its TTL lasts.
func (b *streamBucket) heldAt(now time.Time) held {
	if b == nil || !now.Before(b.until) || b.rate <= 0 {
		return held{}
	}
	return held{rate: b.rate, left: b.until.Sub(now)}
}

// strategyRate is the rate of an action's token bucket, requests per
// second; 0 for a blanket rule (ALLOW_ALL is only ever a default, which
// no owner counts).
func strategyRate(qa *rlqspb.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction) float64 {
	tb := qa.GetRateLimitStrategy().GetTokenBucket()
	fill := tb.GetFillInterval().AsDuration()
	if tb == nil || fill <= 0 {
		return 0
	}
	return float64(tb.GetTokensPerFill().GetValue()) / fill.Seconds()
}

// encodeHeld is the heldKey header's value.
func encodeHeld(hs []held) string {
	parts := make([]string, len(hs))
	for i, h := range hs {
		parts[i] = strconv.FormatFloat(h.rate, 'g', -1, 64) + ":" + strconv.FormatInt(h.left.Milliseconds(), 10)
	}
	return strings.Join(parts, ",")
}

// decodeHeld parses the heldKey header into n entries; a missing or
// malformed entry is none (a node without it: the owner learns nothing).
func decodeHeld(v []string, n int) []held {
	hs := make([]held, n)
	if len(v) != 1 {
		return hs
	}
	for i, part := range strings.Split(v[0], ",") {
		if i >= n {
			break
		}
		rate, ms, ok := strings.Cut(part, ":")
		r, err1 := strconv.ParseFloat(rate, 64)
		m, err2 := strconv.ParseInt(ms, 10, 64)
		if !ok || err1 != nil || err2 != nil || r <= 0 || math.IsInf(r, 0) || math.IsNaN(r) || m <= 0 {
			continue
		}
		hs[i] = held{rate: r, left: time.Duration(m) * time.Millisecond}
	}
	return hs
}
