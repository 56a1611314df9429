package rls

import (
	"cmp"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/shardlimiter/shardlimiter/limit"
	"github.com/shardlimiter/shardlimiter/rules"
)

// HeadersFormat chooses the rate-limit header fields a Service adds.
type HeadersFormat uint8

const (
	// HeadersIETF: RateLimit and RateLimit-Policy of
	// draft-ietf-httpapi-ratelimit-headers-11 (see ietfHeaders).
	HeadersIETF HeadersFormat = iota
	// HeadersRateLimit: envoyproxy/ratelimit's three fields, named by
	// HeaderNames: the limit's requests_per_unit, what remains, and the
	// seconds until the reset (see rateLimitHeaders).
	HeadersRateLimit
)

// ParseHeadersFormat reads a format name: "ietf" or "ratelimit".
func ParseHeadersFormat(s string) (HeadersFormat, error) {
	switch strings.ToLower(s) {
	case "ietf":
		return HeadersIETF, nil
	case "ratelimit":
		return HeadersRateLimit, nil
	}
	return 0, fmt.Errorf("unknown headers format %q (ietf or ratelimit)", s)
}

// HeaderNames are the names of HeadersRateLimit's fields.
type HeaderNames struct{ Limit, Remaining, Reset string }

// orDefault fills the empty names with envoyproxy/ratelimit's defaults.
func (n HeaderNames) orDefault() HeaderNames {
	n.Limit = cmp.Or(n.Limit, "RateLimit-Limit")
	n.Remaining = cmp.Or(n.Remaining, "RateLimit-Remaining")
	n.Reset = cmp.Or(n.Reset, "RateLimit-Reset")
	return n
}

// headers are the header fields of resp in the configured format. closest
// and closestAt are the descriptor and the check closest to its limit
// (IETF), or -1.
func (s *Service) headers(p *request, resp *rlspb.RateLimitResponse, results []limit.Result, closest, closestAt int, now int64) []*corepb.HeaderValue {
	if s.cfg.HeadersFormat == HeadersRateLimit {
		return rateLimitHeaders(s.cfg.HeaderNames, p, resp.Statuses)
	}
	if closest < 0 {
		return nil
	}
	d := &p.descs[closest]
	return ietfHeaders(d.limits[closestAt-d.first], &results[closestAt], now)
}

// rateLimitHeaders are envoyproxy/ratelimit's three fields for the
// descriptor it picks: among the statuses with a current limit, the one
// with the least remaining, unless a descriptor outside quota mode is over
// its limit (then the last such). Reset is whole seconds, rounded up.
func rateLimitHeaders(names HeaderNames, p *request, statuses []*rlspb.RateLimitResponse_DescriptorStatus) []*corepb.HeaderValue {
	var pick *rlspb.RateLimitResponse_DescriptorStatus
	least := uint32(math.MaxUint32)
	for i, st := range statuses {
		if st.GetCurrentLimit() != nil && st.LimitRemaining < least {
			pick, least = st, st.LimitRemaining
		}
		if d := &p.descs[i]; st.Code == rlspb.RateLimitResponse_OVER_LIMIT && !d.quota {
			pick, least = st, 0
		}
	}
	if pick == nil {
		return nil
	}
	return []*corepb.HeaderValue{
		{Key: names.Limit, Value: strconv.FormatUint(uint64(pick.CurrentLimit.RequestsPerUnit), 10)},
		{Key: names.Remaining, Value: strconv.FormatUint(uint64(pick.LimitRemaining), 10)},
		{Key: names.Reset, Value: strconv.FormatInt(ceilSeconds(pick.GetDurationUntilReset().AsDuration()), 10)},
	}
}

// headers are the RateLimit-Policy and RateLimit fields of the IETF
// httpapi draft "RateLimit header fields for HTTP"
// (draft-ietf-httpapi-ratelimit-headers-11, May 2026, the current
// revision; client/httplimit sends the same syntax) for one limit:
//
//	RateLimit-Policy: "api_per_minute";q=100;w=60
//	RateLimit: "api_per_minute";r=42;t=17
//
// q is the quota and w the window in seconds (rounded up, at least 1); r
// is what remains and t the seconds until the quota is restored (rounded
// up, so a client that waits t is never early). Both are Structured
// Fields (RFC 9651) lists of one item whose value is the policy name as
// an sf-string. The RateLimit-Limit/-Remaining/-Reset fields of earlier
// drafts are not sent.
func ietfHeaders(l rules.Limit, r *limit.Result, now int64) []*corepb.HeaderValue {
	name := sfString(l.Name)
	window := max(1, ceilSeconds(l.Rule.Period))
	reset := ceilSeconds(untilReset(r, now))
	return []*corepb.HeaderValue{
		{Key: "RateLimit-Policy", Value: name + ";q=" + strconv.FormatInt(l.Rule.Limit, 10) + ";w=" + strconv.FormatInt(window, 10)},
		{Key: "RateLimit", Value: name + ";r=" + strconv.FormatInt(max(r.Remaining, 0), 10) + ";t=" + strconv.FormatInt(reset, 10)},
	}
}

// ceilSeconds is d in whole seconds, rounded up.
func ceilSeconds(d time.Duration) int64 {
	return int64((d + time.Second - 1) / time.Second)
}

// sfString quotes s as a Structured Fields string: printable ASCII only,
// with '"' and '\' escaped; other bytes become '_'.
func sfString(s string) string {
	var b strings.Builder
	b.Grow(len(s) + 2)
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c < 0x20 || c > 0x7e:
			b.WriteByte('_')
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('"')
	return b.String()
}
