// Package grpclimit implements gRPC server interceptors that rate-limit
// calls through shardlimiter.
//
// Each call (unary, or a stream when it opens) is one check of
// Config.Rule for the key Config.Key derives from it. An admitted call
// proceeds; a rejected one fails with codes.ResourceExhausted whose status
// details carry an errdetails.RetryInfo with the delay after which the
// same call could be admitted (none when it never could: its cost exceeds
// the limit). gRPC clients and proxies read RetryInfo as "retry after".
//
// When the limiter cannot be reached, Config.FailOpen chooses: let the call
// proceed, or fail it with codes.Unavailable and a RetryInfo. A check the
// limiter refuses as invalid (a configuration error) fails with
// codes.Internal either way.
//
// The interceptors are safe for concurrent use and start no goroutine.
package grpclimit

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/shardlimiter/shardlimiter/client"
	"github.com/shardlimiter/shardlimiter/limit"
)

// Checker decides one check; *client.Client is one.
type Checker interface {
	Check(ctx context.Context, c limit.Check) (limit.Result, error)
}

// Config configures the interceptors.
type Config struct {
	// Checker decides the checks, usually a *client.Client. Required.
	Checker Checker
	// Name is the rule name. Required.
	Name string
	// Rule is the limit applied to each key. Required (limit.Rule.Validate).
	Rule limit.Rule
	// Key returns the limited entity of a call from its context (incoming
	// metadata, peer, auth info) and full method name. An empty key means
	// the call is not limited. Required.
	Key func(ctx context.Context, fullMethod string) string
	// Hits returns the cost of a call; nil means 1.
	Hits func(ctx context.Context, fullMethod string) int64
	// FailOpen lets calls proceed when the limiter cannot answer; false
	// (fail closed) fails them with codes.Unavailable.
	FailOpen bool
	// UnavailableRetry is the RetryInfo delay of a fail-closed refusal when
	// the limiter gave none of its own; zero means 1 s.
	UnavailableRetry time.Duration
}

// limiter is a validated Config.
type limiter struct{ cfg Config }

func newLimiter(cfg Config) (*limiter, error) {
	switch {
	case cfg.Checker == nil:
		return nil, errors.New("grpclimit: Config.Checker is nil")
	case cfg.Key == nil:
		return nil, errors.New("grpclimit: Config.Key is nil")
	case cfg.Name == "":
		return nil, errors.New("grpclimit: Config.Name is empty")
	}
	if err := cfg.Rule.Validate(); err != nil {
		return nil, fmt.Errorf("grpclimit: Config.Rule: %w", err)
	}
	if cfg.UnavailableRetry <= 0 {
		cfg.UnavailableRetry = time.Second
	}
	return &limiter{cfg: cfg}, nil
}

// UnaryServerInterceptor limits unary calls.
func UnaryServerInterceptor(cfg Config) (grpc.UnaryServerInterceptor, error) {
	l, err := newLimiter(cfg)
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if err := l.admit(ctx, info.FullMethod); err != nil {
			return nil, err
		}
		return handler(ctx, req)
	}, nil
}

// StreamServerInterceptor limits streams: one check when a stream opens.
func StreamServerInterceptor(cfg Config) (grpc.StreamServerInterceptor, error) {
	l, err := newLimiter(cfg)
	if err != nil {
		return nil, err
	}
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		if err := l.admit(ss.Context(), info.FullMethod); err != nil {
			return err
		}
		return handler(srv, ss)
	}, nil
}

// admit returns nil when the call may proceed, else its status error.
func (l *limiter) admit(ctx context.Context, method string) error {
	key := l.cfg.Key(ctx, method)
	if key == "" {
		return nil
	}
	hits := int64(1)
	if l.cfg.Hits != nil {
		hits = l.cfg.Hits(ctx, method)
	}
	res, err := l.cfg.Checker.Check(ctx, limit.Check{Name: l.cfg.Name, Key: key, Hits: hits, Rule: l.cfg.Rule})
	var ce *client.CheckError
	switch {
	case err == nil && res.Allowed:
		return nil
	case err == nil:
		return refusal(codes.ResourceExhausted, "rate limit exceeded", res.RetryAfter)
	case errors.As(err, &ce) && ce.Reason == limit.Invalid:
		return status.Error(codes.Internal, "rate limit misconfigured")
	case ctx.Err() != nil:
		return status.FromContextError(ctx.Err()).Err()
	case l.cfg.FailOpen:
		return nil
	}
	delay, ok := client.RetryDelay(err)
	if !ok {
		delay = l.cfg.UnavailableRetry
	}
	return refusal(codes.Unavailable, "rate limiter unavailable", delay)
}

// refusal is a status with a RetryInfo of delay (none for limit.Never).
func refusal(code codes.Code, msg string, delay time.Duration) error {
	st := status.New(code, msg)
	if delay == limit.Never {
		return st.Err()
	}
	if d, err := st.WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(delay)}); err == nil {
		st = d
	}
	return st.Err()
}
