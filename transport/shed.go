package transport

import (
	"context"
	"errors"
	"net/http"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/shardlimiter/shardlimiter/limit"
)

// Load shedding for services served beside ours (GRPCConfig.Register and
// handlers wrapped around the HTTP API, such as package rls's): the same
// in-flight bound, the same refusal, status codes and metric as the
// RateLimiter service and POST /v1/GetRateLimits.

// BoundChecker returns a Checker that passes a call to next only when its
// checks fit under b (one unit per check, as the native API counts them;
// see [InFlight]) and holds them until next returns. A call that does not
// fit is refused at once with an error wrapping ErrOverloaded, counted in m
// as a shed of listener (ListenerGRPC or ListenerHTTP; another name counts
// nothing). A nil b bounds nothing. It is safe for concurrent use if next is.
func BoundChecker(next Checker, b *InFlight, m *Metrics, listener string) Checker {
	if b == nil {
		return next
	}
	l := -1
	for i, name := range listenerNames {
		if name == listener {
			l = i
		}
	}
	return &boundChecker{next: next, b: b, m: m, listener: l}
}

type boundChecker struct {
	next     Checker
	b        *InFlight
	m        *Metrics
	listener int // listener* index, -1: not counted
}

func (c *boundChecker) Check(ctx context.Context, checks []limit.Check) ([]limit.Result, error) {
	units, err := c.b.acquireChecks(len(checks), c.m, c.listener)
	if err != nil {
		return nil, err
	}
	defer c.b.Release(units)
	return c.next.Check(ctx, checks)
}

// GRPCStatus returns the status our gRPC services answer err with: the code
// of [Code], and for a refusal for overload errdetails.RetryInfo with
// ShedRetryDelay (see [IsShed]). A status error keeps its code and message.
func GRPCStatus(err error) error {
	if _, ok := status.FromError(err); ok && !errors.Is(err, ErrOverloaded) {
		return err
	}
	return grpcError(err)
}

// WriteHTTPError answers a failed call as the HTTP API does, with
// {"error": …} and the HTTP status of err's code ([Code]); a refusal for
// overload (ErrOverloaded, or a status that [IsShed]) is 429 with
// Retry-After and retry_after_ms. It returns the status written.
func WriteHTTPError(w http.ResponseWriter, err error) int {
	msg := err.Error()
	if st, ok := status.FromError(err); ok {
		msg = st.Message()
	}
	if errors.Is(err, ErrOverloaded) || IsShed(err) {
		return writeOverloaded(w, msg)
	}
	code := Code(err)
	if code == codes.OK {
		code = codes.Internal
	}
	return writeError(w, httpStatus(code), msg)
}
