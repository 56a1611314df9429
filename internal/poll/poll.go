// Package poll is the project's one way for a test to wait for a condition:
// it checks the condition at a short interval until it holds or a deadline
// passes. Tests never sleep for a fixed time to let something happen; they
// poll for the thing itself.
package poll

import (
	"fmt"
	"time"
)

// Interval is how often Until checks its condition. It is a polling period,
// not a wait for an event: conditions are cheap reads of local state.
const Interval = 5 * time.Millisecond

// TB is the part of testing.TB that Until uses.
type TB interface {
	Helper()
	Fatalf(format string, args ...any)
}

// Until calls cond every Interval until it returns true and returns how long
// that took. If cond is still false after timeout, the test fails with the
// message built from format and args.
func Until(t TB, timeout time.Duration, cond func() bool, format string, args ...any) time.Duration {
	t.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start) > timeout {
			t.Fatalf("not within %v: %s", timeout, fmt.Sprintf(format, args...))
			return time.Since(start)
		}
		time.Sleep(Interval)
	}
	return time.Since(start)
}
