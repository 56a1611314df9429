package peer

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/shardlimiter/shardlimiter/transport"
)

// shedErr is a receiver's refusal for overload as a StateClient returns it.
func shedErr(d time.Duration) error {
	st, _ := status.New(codes.ResourceExhausted, "overloaded").WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(d)})
	return fmt.Errorf("transport: state x: %w: %w", transport.ErrOverloaded, st.Err())
}

func TestWaitShedWaitsTheAskedDelay(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		if !waitShed(context.Background(), shedErr(100*time.Millisecond)) {
			t.Fatal("waitShed = false with a live context")
		}
		if got := time.Since(start); got != 100*time.Millisecond {
			t.Fatalf("waited %v after a shed asking for 100ms", got)
		}
		start = time.Now()
		if !waitShed(context.Background(), errors.New("connection refused")) || time.Since(start) != 0 {
			t.Fatal("waitShed waited after an error that is not a shed")
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
		defer cancel()
		start = time.Now()
		if waitShed(ctx, shedErr(time.Second)) {
			t.Fatal("waitShed = true although its context ended first")
		}
		if got := time.Since(start); got != 30*time.Millisecond {
			t.Fatalf("waited %v, want the context's 30ms", got)
		}
	})
}
