package transport

import (
	"errors"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
)

// ErrInvalidArgument classifies a request the caller got wrong; answered
// InvalidArgument / HTTP 400.
var ErrInvalidArgument = errors.New("invalid argument")

// ShedRetryDelay is the delay a refused call is told to wait before trying
// again: gRPC puts it in the status's errdetails.RetryInfo, HTTP in the
// JSON body (retry_after_ms) and, rounded up to whole seconds as the
// header requires, in Retry-After. The work that filled the node finishes
// in milliseconds; a short delay spreads the retries of many clients
// without idling the node for long.
const ShedRetryDelay = 100 * time.Millisecond

// ErrOverloaded: the node refused the call at once because it has as much
// work in flight as its bound allows (see [InFlight]). Answered with
// codes.ResourceExhausted / HTTP 429 and a retry delay. Nothing of the call
// was decided, so it is safe to retry, after ShedRetryDelay or on another
// node.
var ErrOverloaded = errors.New("transport: overloaded")

// GRPCError is the status a gRPC server answers err with (see [Code]). A
// refusal for overload carries errdetails.RetryInfo with ShedRetryDelay,
// which gRPC clients and proxies read as "retry after".
func GRPCError(err error) error {
	code := Code(err)
	st := status.New(code, err.Error())
	if code == codes.ResourceExhausted {
		if d, derr := st.WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(ShedRetryDelay)}); derr == nil {
			st = d
		}
	}
	return st.Err()
}

// RetryDelay returns the delay a refusal for overload asks for (its
// errdetails.RetryInfo), and false when err carries none.
func RetryDelay(err error) (time.Duration, bool) {
	st, _ := status.FromError(err) // also finds a wrapped status
	for _, d := range st.Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok && ri.GetRetryDelay() != nil {
			return ri.GetRetryDelay().AsDuration(), true
		}
	}
	return 0, false
}

// IsShed reports whether err is a server's refusal for overload:
// ResourceExhausted with a retry delay. gRPC's own ResourceExhausted (a
// message over the receive limit) carries no delay and is not a shed:
// retrying it cannot succeed.
func IsShed(err error) bool {
	if status.Code(err) != codes.ResourceExhausted {
		return false
	}
	_, ok := RetryDelay(err)
	return ok
}

// GRPCStatus returns the status our gRPC services answer err with: the code
// of [Code], and for a refusal for overload errdetails.RetryInfo with
// ShedRetryDelay (see [IsShed]). A status error keeps its code and message.
func GRPCStatus(err error) error {
	if _, ok := status.FromError(err); ok && !errors.Is(err, ErrOverloaded) {
		return err
	}
	return GRPCError(err)
}
