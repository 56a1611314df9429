// Package httplimit implements net/http middleware that rate-limits
// requests through shardlimiter.
//
// Each request is one check of Config.Rule for the key Config.Key derives
// from it. An admitted request is served; a rejected one is answered 429
// Too Many Requests with Retry-After. Every answer the limiter decided
// carries the RateLimit-Policy and RateLimit header fields of the IETF
// httpapi draft "RateLimit header fields for HTTP"
// (draft-ietf-httpapi-ratelimit-headers-11, May 2026): Structured Field
// lists of one item each, named after the rule,
//
//	RateLimit-Policy: "api_per_minute";q=100;w=60
//	RateLimit: "api_per_minute";r=42;t=17
//
// with q the rule's limit, w its period in seconds (rounded up), r what the
// key has left and t the seconds until it is back to full capacity (rounded
// up). The older RateLimit-Limit/-Remaining/-Reset fields of earlier drafts
// are not sent.
//
// When the limiter cannot be reached (or refuses the call for overload),
// Config.FailOpen chooses: serve the request without the fields, or answer
// 503 Service Unavailable with Retry-After. A check the limiter refuses as
// invalid (a bad rule: a configuration error) is answered 500 either way.
//
// The middleware is safe for concurrent use; it starts no goroutine.
package httplimit

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/shardlimiter/shardlimiter/client"
	"github.com/shardlimiter/shardlimiter/limit"
)

// Checker decides one check; *client.Client is one.
type Checker interface {
	Check(ctx context.Context, c limit.Check) (limit.Result, error)
}

// Config configures the middleware.
type Config struct {
	// Checker decides the checks, usually a *client.Client. Required.
	Checker Checker
	// Name is the rule name; it is also the policy name in the header
	// fields, so it must be printable ASCII. Required.
	Name string
	// Rule is the limit applied to each key. Required (limit.Rule.Validate).
	Rule limit.Rule
	// Key returns the limited entity of a request (an account, an API key,
	// a client address). An empty key means the request is not limited: it
	// is served without a check. Required.
	Key func(*http.Request) string
	// Hits returns the cost of a request; nil means 1.
	Hits func(*http.Request) int64
	// FailOpen serves requests when the limiter cannot answer; false
	// (fail closed) answers them 503. Open keeps the service up through a
	// limiter outage at the price of no limits meanwhile.
	FailOpen bool
	// UnavailableRetry is the Retry-After of a fail-closed 503 when the
	// limiter gave no delay of its own; zero means 1 s.
	UnavailableRetry time.Duration
	// Now reads the clock, to turn the reset time into seconds; nil means
	// time.Now.
	Now func() time.Time
}

// New returns the middleware, or an error for an incomplete Config.
func New(cfg Config) (func(http.Handler) http.Handler, error) {
	switch {
	case cfg.Checker == nil:
		return nil, errors.New("httplimit: Config.Checker is nil")
	case cfg.Key == nil:
		return nil, errors.New("httplimit: Config.Key is nil")
	case cfg.Name == "" || !printable(cfg.Name):
		return nil, fmt.Errorf("httplimit: Config.Name %q must be non-empty printable ASCII", cfg.Name)
	}
	if err := cfg.Rule.Validate(); err != nil {
		return nil, fmt.Errorf("httplimit: Config.Rule: %w", err)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.UnavailableRetry <= 0 {
		cfg.UnavailableRetry = time.Second
	}
	policy := fmt.Sprintf("%s;q=%d;w=%d", sfString(cfg.Name), cfg.Rule.Limit, max(1, ceilSeconds(cfg.Rule.Period)))
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			cfg.serve(w, r, next, policy)
		})
	}, nil
}

func (cfg *Config) serve(w http.ResponseWriter, r *http.Request, next http.Handler, policy string) {
	key := cfg.Key(r)
	if key == "" {
		next.ServeHTTP(w, r)
		return
	}
	hits := int64(1)
	if cfg.Hits != nil {
		hits = cfg.Hits(r)
	}
	res, err := cfg.Checker.Check(r.Context(), limit.Check{Name: cfg.Name, Key: key, Hits: hits, Rule: cfg.Rule})
	if err != nil {
		cfg.failed(w, r, next, err)
		return
	}
	h := w.Header()
	h.Set("RateLimit-Policy", policy)
	reset := time.Duration(res.ResetAt - cfg.Now().UnixNano())
	h.Set("RateLimit", fmt.Sprintf("%s;r=%d;t=%d", sfString(cfg.Name), max(0, res.Remaining), max(0, ceilSeconds(reset))))
	if res.Allowed {
		next.ServeHTTP(w, r)
		return
	}
	if res.RetryAfter != limit.Never {
		h.Set("Retry-After", strconv.FormatInt(max(1, ceilSeconds(res.RetryAfter)), 10))
	}
	http.Error(w, "rate limit exceeded", http.StatusTooManyRequests)
}

// failed answers a request whose check was not decided.
func (cfg *Config) failed(w http.ResponseWriter, r *http.Request, next http.Handler, err error) {
	var ce *client.CheckError
	switch {
	case errors.As(err, &ce) && ce.Reason == limit.Invalid:
		http.Error(w, "rate limit misconfigured", http.StatusInternalServerError)
	case r.Context().Err() != nil:
		// The caller has gone: nobody reads the answer.
		http.Error(w, "request canceled", http.StatusServiceUnavailable)
	case cfg.FailOpen:
		next.ServeHTTP(w, r)
	default:
		delay, ok := client.RetryDelay(err)
		if !ok {
			delay = cfg.UnavailableRetry
		}
		w.Header().Set("Retry-After", strconv.FormatInt(max(1, ceilSeconds(delay)), 10))
		http.Error(w, "rate limiter unavailable", http.StatusServiceUnavailable)
	}
}

// ceilSeconds rounds d up to whole seconds (delay-seconds).
func ceilSeconds(d time.Duration) int64 {
	return int64((d + time.Second - 1) / time.Second)
}

// sfString encodes s as a Structured Field String (RFC 9651 §3.3.3):
// quoted, with '"' and '\' escaped. s must be printable ASCII.
func sfString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		if s[i] == '"' || s[i] == '\\' {
			b.WriteByte('\\')
		}
		b.WriteByte(s[i])
	}
	b.WriteByte('"')
	return b.String()
}

func printable(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}
