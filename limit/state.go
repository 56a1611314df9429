package limit

// KeyState is one key's state in one algorithm's table, as moved between
// nodes: on a membership change (handoff) and to the node that would own the
// key next (replication). Key is the node's table key; State is encoded by
// the algorithm's package (Limiter.Export) and merged by it on arrival
// (Limiter.Import).
//
// A KeyState whose Algorithm is LeaseBook is no table's: its State holds the
// owner's records of the key's outstanding lease grants (package
// peer/leasing encodes them), which travel with the key's state.
type KeyState struct {
	Algorithm Algorithm
	Key       string
	State     []byte
}

// LeaseBook is the Algorithm of a KeyState that carries a key's
// outstanding lease grants rather than a table's state. It is no
// algorithm a rule may name (Rule.Validate refuses it) and only nodes
// send it.
const LeaseBook Algorithm = 0x7F

// Moved reports whether nodes move key states of a: the algorithms up to
// MaxAlgorithm, and LeaseBook.
func (a Algorithm) Moved() bool { return a <= MaxAlgorithm || a == LeaseBook }

// PullRequest asks a node to hand over partitions to the puller, whose
// ring gives them to it (the State service's Pull).
type PullRequest struct {
	From string // the puller's node name (the link sets it)
	// Members fingerprints the member list of the puller's ring; Names
	// lists it (empty from an older puller).
	Members uint64
	Names   []string
	// Addr and PeerAddr are the puller's own client and peer addresses,
	// for a holder whose gossip has not heard of it yet.
	Addr, PeerAddr string
	Partitions     []int
}

// Transfer says why key states are moved, for metrics and logs.
type Transfer uint8

const (
	Replica Transfer = iota // changed keys, every replication interval
	Join                    // handoff after a node joined
	Leave                   // handoff after a node left
	numTransfers
)

var transferNames = [numTransfers]string{"replica", "join", "leave"}

// String returns a lower-case metric label value, e.g. "join".
func (t Transfer) String() string {
	if t < numTransfers {
		return transferNames[t]
	}
	return "unknown"
}

// Transfers lists every Transfer.
func Transfers() []Transfer { return []Transfer{Replica, Join, Leave} }

// StateMover is the part of a Limiter that moves per-key state between
// nodes: handoff when ring ownership changes, and replication of changed
// keys to a backup. Keys are the node's table keys, opaque to the Limiter;
// states are bytes the algorithm's package encodes (versioned and
// self-describing: the receiver needs no rule to merge them).
//
// Every method is safe for concurrent use with takes and with each other.
// None calls out while holding a lock of the table.
type StateMover interface {
	// Export returns key's encoded state at now (Unix ns); ok is false when
	// the key is absent or its state equals a fresh key's (nothing worth
	// moving). It holds the key's lock for a few loads.
	Export(key string, now int64) (state []byte, ok bool)
	// Import merges an exported state into key at now: it inserts the key
	// when absent (respecting the key cap, which may evict a least recently
	// used key) and otherwise keeps whichever of the two states has
	// consumed more, so that the key never admits more than either would
	// have. Bytes that do not decode, or belong to another algorithm, are
	// an error and change nothing. Concurrent takes on the key stay exact:
	// the merge uses the key's own locking protocol. With mark, a merge that
	// changed the key marks it changed (see Changed): a key moved here then
	// reaches this node's replica. A replica is imported without: it needs
	// no replica of its own, and marking it would send it back.
	Import(key string, state []byte, now int64, mark bool) error
	// Range calls fn with every key held until fn returns false. fn runs
	// with no lock of the table held and may call any method; keys added
	// or removed meanwhile may or may not be visited.
	Range(fn func(key string) bool)
	// Delete removes key and reports whether it was held. A take racing it
	// starts over from a fresh key; it never updates the removed state.
	Delete(key string) bool
	// Changed calls fn with up to max keys whose state changed since they
	// were last handed out, and returns how many it handed out. A key's
	// mark is cleared before fn sees it, so a change made after that marks
	// it again: no change is lost, and fn may Export the key to send it.
	// Only a table made with table.Config.TrackChanges marks keys; others
	// hand out none. fn runs with no lock of the table held.
	Changed(max int, fn func(key string)) int
	// TrackChanges turns the marking of changed keys on or off (see
	// table.Table.SetTrackChanges); a node turns it off while alone.
	TrackChanges(on bool)
}
