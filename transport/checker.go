package transport

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/shardlimiter/shardlimiter/limit"
)

// Checker decides a batch. results[i] answers checks[i]; every item gets a
// Result (per-item problems go in Result.Error/Reason). A non-nil error fails
// the whole call (e.g. limit-level shutdown) and is mapped to a status code
// here (see [Code]).
//
// Check is called concurrently from many RPCs. It must not retain checks
// after it returns: the servers reuse that memory for the next call. It owns
// nothing of the returned results once it has returned them.
type Checker interface {
	Check(ctx context.Context, checks []limit.Check) ([]limit.Result, error)
}

// CheckerInto is a [Checker] that can also answer into memory the caller
// gives it, so that a server reuses the memory of its answers from call to
// call instead of the checker allocating it for each.
//
// CheckInto decides checks as Check does, writing results[i] for checks[i];
// results has the length of checks and is zeroed by the caller. It must not
// retain results after it returns. The error is Check's.
type CheckerInto interface {
	Checker
	CheckInto(ctx context.Context, checks []limit.Check, results []limit.Result) error
}

// CheckerFunc adapts a function to [Checker].
type CheckerFunc func(ctx context.Context, checks []limit.Check) ([]limit.Result, error)

// Check calls f.
func (f CheckerFunc) Check(ctx context.Context, checks []limit.Check) ([]limit.Result, error) {
	return f(ctx, checks)
}

// Errors that classify a failed call. A [Checker] returns one of them
// (wrapped with %w or bare) to choose the status of the whole call; the
// clients of this package wrap them so that callers can tell the failure
// kinds apart with errors.Is.
var (
	// ErrShuttingDown: the node is leaving and answers no more checks.
	// Answered with codes.Unavailable / HTTP 503 so that clients retry elsewhere.
	ErrShuttingDown = errors.New("transport: shutting down")
	// ErrUnavailable: the other end could not be reached or refused the call.
	ErrUnavailable = errors.New("transport: unavailable")
	// ErrTimeout: the call did not complete in time.
	ErrTimeout = errors.New("transport: timed out")
	// ErrClosed: the client was closed before the check was answered.
	ErrClosed = errors.New("transport: client closed")
	// ErrPermissionDenied: the node does not allow the caller what it
	// asked (a client lease where client leases are off). Answered with
	// codes.PermissionDenied / HTTP 403; retrying cannot succeed.
	ErrPermissionDenied = errors.New("transport: permission denied")
)

// callError is a failed call of one of this package's clients. Its text
// names each part once, "transport: forward to 10.0.0.7:8082: unavailable:
// connection refused", where wrapping with %w would repeat the prefixes of
// the kind and of gRPC ("transport: …: transport: unavailable: rpc error:
// code = Unavailable desc = …"); errors.Is finds the kind and the cause,
// status.Code the gRPC code.
type callError struct {
	msg         string
	kind, cause error // kind is nil for an unclassified cause
}

func (e *callError) Error() string { return e.msg }
func (e *callError) Unwrap() []error {
	var out []error
	for _, err := range []error{e.kind, e.cause} {
		if err != nil {
			out = append(out, err)
		}
	}
	return out
}

// CallFailed describes the failure of call (what was asked of whom): kind is
// one of the Err values above or nil, cause what happened, or nil.
func CallFailed(call string, kind, cause error) error {
	msg := "transport: " + call
	if kind != nil {
		msg += ": " + strings.TrimPrefix(kind.Error(), "transport: ")
	}
	if cause != nil && cause != kind {
		msg += ": " + causeText(cause)
	}
	return &callError{msg: msg, kind: kind, cause: cause}
}

// causeText is the message of a gRPC status without gRPC's "rpc error:
// code = … desc =" framing (the kind says it already), or err's text.
func causeText(err error) string {
	if st, ok := status.FromError(err); ok && st.Message() != "" {
		return st.Message()
	}
	return err.Error()
}

// BatchError rejects a whole call whose batch holds too many items.
type BatchError struct{ N, Max int }

func (e *BatchError) Error() string {
	return "transport: batch of " + strconv.Itoa(e.N) + " items exceeds the limit of " + strconv.Itoa(e.Max)
}

// MalformedError is a request that is not valid proto: the whole call is
// answered InvalidArgument.
type MalformedError struct{ Err error }

func (e *MalformedError) Error() string { return e.Err.Error() }
func (e *MalformedError) Unwrap() error { return e.Err }

// Code returns the gRPC status code a server answers a failed call with:
//
//	nil                                      OK
//	batch over MaxBatch, malformed request,
//	ErrInvalidArgument                       InvalidArgument
//	ErrShuttingDown, ErrUnavailable,
//	ErrClosed                                Unavailable
//	ErrOverloaded                            ResourceExhausted
//	ErrPermissionDenied                      PermissionDenied
//	ErrTimeout, context.DeadlineExceeded     DeadlineExceeded
//	context.Canceled                         Canceled
//	an error carrying a gRPC status          that status's code
//	anything else                            Internal
func Code(err error) codes.Code {
	switch {
	case err == nil:
		return codes.OK // every answered call: it allocates nothing
	case isInvalid(err):
		return codes.InvalidArgument
	case errors.Is(err, ErrOverloaded):
		return codes.ResourceExhausted
	case errors.Is(err, ErrPermissionDenied):
		return codes.PermissionDenied
	case errors.Is(err, ErrShuttingDown), errors.Is(err, ErrUnavailable), errors.Is(err, ErrClosed):
		return codes.Unavailable
	case errors.Is(err, ErrTimeout), errors.Is(err, context.DeadlineExceeded):
		return codes.DeadlineExceeded
	case errors.Is(err, context.Canceled):
		return codes.Canceled
	}
	if s, ok := status.FromError(err); ok && s.Code() != codes.Unknown {
		return s.Code()
	}
	return codes.Internal
}

// isInvalid reports an error of the caller's request. Its targets escape
// to errors.As, so they live here, where only failed calls pay for them.
func isInvalid(err error) bool {
	var be *BatchError
	var me *MalformedError
	return errors.As(err, &be) || errors.As(err, &me) || errors.Is(err, ErrInvalidArgument)
}

// HTTPStatus maps a gRPC code to the HTTP status of the JSON API.
func HTTPStatus(c codes.Code) int {
	switch c {
	case codes.OK:
		return http.StatusOK
	case codes.InvalidArgument:
		return http.StatusBadRequest
	case codes.Unavailable:
		return http.StatusServiceUnavailable
	case codes.DeadlineExceeded:
		return http.StatusGatewayTimeout
	case codes.Canceled:
		return 499 // client closed request (nginx); nobody reads it
	case codes.Unimplemented:
		return http.StatusNotImplemented
	case codes.ResourceExhausted:
		return http.StatusTooManyRequests
	case codes.PermissionDenied:
		return http.StatusForbidden
	}
	return http.StatusInternalServerError
}
