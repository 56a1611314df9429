package transport_test

import (
	"context"
	"fmt"

	"github.com/shardlimiter/shardlimiter/transport"
)

// A Checker chooses the status of a failed call by the error it returns;
// every server of the node answers the same code for it.
func ExampleCode() {
	for _, err := range []error{
		nil,
		fmt.Errorf("node: %w", transport.ErrShuttingDown),
		fmt.Errorf("flood: %w", transport.ErrOverloaded),
		context.DeadlineExceeded,
	} {
		fmt.Println(transport.Code(err), transport.HTTPStatus(transport.Code(err)))
	}
	// Output:
	// OK 200
	// Unavailable 503
	// ResourceExhausted 429
	// DeadlineExceeded 504
}
