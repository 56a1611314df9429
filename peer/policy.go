package peer

import (
	"fmt"

	"github.com/shardlimiter/shardlimiter/limit"
)

// FailPolicy decides a check whose owner cannot be reached.
type FailPolicy uint8

const (
	// FailLocal decides on this node's own table (the default): the key
	// keeps being limited, by a second counter, until the owner is back or
	// the ring drops it. Clients see answers, never errors.
	FailLocal FailPolicy = iota
	// FailOpen admits the check.
	FailOpen
	// FailClosed rejects the check with an item error.
	FailClosed
)

var policyNames = [...]string{"local", "open", "closed"}

func (p FailPolicy) String() string {
	if int(p) < len(policyNames) {
		return policyNames[p]
	}
	return fmt.Sprintf("FailPolicy(%d)", p)
}

// ParseFailPolicy parses "local", "open" or "closed".
func ParseFailPolicy(s string) (FailPolicy, error) {
	for i, n := range policyNames {
		if s == n {
			return FailPolicy(i), nil
		}
	}
	return 0, fmt.Errorf("peer: unknown fail policy %q (want local, open or closed)", s)
}

// openDecision is what FailOpen answers: admitted, nothing known of the
// key's state.
func openDecision(now int64) limit.Decision {
	return limit.Decision{Allowed: true, ResetAt: now}
}
