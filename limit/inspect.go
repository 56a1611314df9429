package limit

// KeyView is what one node holds of a key under a rule, read without
// changing anything: for operators inspecting a key, never for decisions.
type KeyView struct {
	// Node names the node that read its table.
	Node string
	// Held reports whether the node holds state for the key; false means
	// a fresh key (full allowance).
	Held bool
	// Limit is the limit of the rule the key was read under.
	Limit int64
	// Decision is the answer a check of 0 hits would get: Allowed and
	// RetryAfter for one hit, Remaining, ResetAt. Nothing is counted.
	Decision
	// WindowEnd (Unix ns), Previous and Current are the counts of a
	// window algorithm (window.Counts); zero for the buckets.
	WindowEnd, Previous, Current int64
	// Error is non-empty when the node could not be asked or could not
	// read the key; the fields above are then zero.
	Error string
	// Leases are the outstanding leases the node granted of the key, one
	// per lessee, sorted by lessee (the owner's view only).
	Leases []LeaseView
}

// LeaseView is what one lessee holds of a key in leases its owner granted.
type LeaseView struct {
	Lessee string
	// Hits were granted to it and not yet given back: taken from the key
	// at the grants, whether or not the lessee used them since.
	Hits int64
	// Expires is when its last grant ends (Unix ns).
	Expires int64
}

// Inspection is a key's state on its owner and on the node that holds its
// replica.
type Inspection struct {
	// Owner is the owner's view; Owner.Node names the owner.
	Owner KeyView
	// Replica is the replica holder's view; Replica.Node is empty when
	// there is none (replication off, or no other node).
	Replica KeyView
}
