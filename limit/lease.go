package limit

import "time"

// A lease is a share of a key's capacity that the key's owner grants
// another decider, debited from the key's state as if its hits had been
// taken (see docs/ARCHITECTURE.md, "Leases"). These are the messages of
// the node-to-node lease call; the node (peer/lease.go) gives them their
// meaning.

// LeaseRequest asks the owner of Key for a grant of up to Want hits under
// Rule, ends its grant Release giving back Leftover hits, or both.
type LeaseRequest struct {
	From     string // the lessee's node name
	Key      string // the node's table key (rule name and unique key)
	Rule     Rule   // Rule.Algorithm selects the table
	Want     int64  // hits asked for; 0 asks for none
	Release  uint64 // a grant of this owner to end; 0 for none
	Leftover int64  // hits of Release the lessee did not use
	// Client says the lessee is a client process of the receiving node
	// (api/lease), named by From, rather than another member: the
	// receiver grants it as it grants a member. Never set from a peer's
	// wire message.
	Client bool
}

// LeaseGrant answers a LeaseRequest.
type LeaseGrant struct {
	// NotOwner names the node the receiver takes for the key's owner when
	// it does not decide the key: nothing was granted or released.
	NotOwner string
	ID       uint64        // the grant; 0 when none
	Hits     int64         // granted, already debited from the key
	TTL      time.Duration // the grant ends this long after it was asked for
	// Deny > 0 says the key is over its limit: refuse its checks for that
	// long (a deny lease).
	Deny     time.Duration
	Credited int64 // hits of the release given back to the key
}
