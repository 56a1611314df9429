package limit

import (
	"fmt"
	"unicode/utf8"
)

// Bounds on the identity of a check.
const (
	MaxNameLen = 128  // bytes in a rule name
	MaxKeyLen  = 1024 // bytes in a unique key
	MaxHits    = MaxLimit
)

// Check asks whether Key may spend Hits more under the rule Name.
type Check struct {
	Name string // rule name, e.g. "api_per_minute"
	Key  string // the limited entity, e.g. "account:42"; the ring routes on it
	Hits int64  // 0 peeks: report the state, consume nothing
	Rule Rule
	// Chained joins this check to the next one of its batch: a run of
	// chained checks ended by an unchained one is a group, decided all or
	// nothing (see Group).
	Chained bool
}

// Validate reports the first problem with the check, or nil. Its messages
// are meant for the caller: they name the field at fault.
func (c Check) Validate() error {
	switch {
	case c.Name == "":
		return fmt.Errorf("name is empty")
	case len(c.Name) > MaxNameLen:
		return fmt.Errorf("name is %d bytes, max %d", len(c.Name), MaxNameLen)
	case !utf8.ValidString(c.Name):
		return fmt.Errorf("name is not valid UTF-8")
	case c.Key == "":
		return fmt.Errorf("unique_key is empty")
	case len(c.Key) > MaxKeyLen:
		return fmt.Errorf("unique_key is %d bytes, max %d", len(c.Key), MaxKeyLen)
	case c.Rule.Algorithm.Gubernator():
		return c.validateGubernatorHits()
	case c.Rule.Algorithm == Cell:
		return c.validateCellHits()
	case c.Hits < 0:
		return fmt.Errorf("hits must be >= 0, got %d", c.Hits)
	case c.Hits > MaxHits:
		return fmt.Errorf("hits must be <= %d, got %d", MaxHits, c.Hits)
	}
	return c.Rule.Validate()
}

// Reason classifies why a check failed, for metrics and status codes.
type Reason uint8

const (
	OK          Reason = iota // no error
	Invalid                   // the check itself is malformed
	Unavailable               // the owner could not be reached (fail-closed policy)
	Closing                   // the node is shutting down
	Internal                  // anything else
	// NotOwner: a node was asked to decide a key it does not own (peer to
	// peer only); Result.Owner names the node it takes for the owner. A
	// node routes such a check again and never passes this to a client.
	NotOwner
	numReasons
)

var reasonNames = [numReasons]string{"ok", "invalid_argument", "unavailable", "closing", "internal", "not_owner"}

// String returns a lower-case metric label value, e.g. "invalid_argument".
func (r Reason) String() string {
	if r < numReasons {
		return reasonNames[r]
	}
	return "internal"
}

// Reasons lists every Reason.
func Reasons() []Reason { return []Reason{OK, Invalid, Unavailable, Closing, Internal, NotOwner} }

// Result is the answer to one check as it travels back to the client: the
// decision, or an error that concerns this check alone.
type Result struct {
	Decision
	// Error is non-empty when this check failed (bad input, owner
	// unreachable under a fail-closed policy); Decision is then zero.
	Error string
	// Reason classifies Error; OK when Error is empty.
	Reason Reason
	// Owner names the node that decided.
	Owner string
}

// Failed returns the Result of a check that failed for reason with err.
func Failed(reason Reason, err error) Result {
	return Result{Error: err.Error(), Reason: reason}
}
