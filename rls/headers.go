package rls

import (
	"strconv"
	"strings"
	"time"

	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"

	"github.com/shardlimiter/shardlimiter/limit"
	"github.com/shardlimiter/shardlimiter/rules"
)

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
func headers(l rules.Limit, r *limit.Result, now int64) []*corepb.HeaderValue {
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
