// Package ring implements the key→owner map of a shardlimiter cluster: an
// immutable Snapshot, built from the member list, that tells every node which
// member owns a rate-limit key.
//
// # Model
//
// The key space is cut into a fixed number of partitions
// (Config.PartitionCount); a key belongs to partition xxhash(key) mod
// PartitionCount. Partitions are placed on members by consistent hashing with
// bounded loads (github.com/buraksezer/consistent, hashed with
// github.com/cespare/xxhash/v2): each member appears ReplicationFactor times
// on a hash ring, and a partition goes to the first member clockwise from the
// partition's own hash that holds fewer than ⌈Load·P/N⌉ partitions. New runs
// that placement once and keeps only the resulting partition→owner table, so a
// lookup is one hash, one modulo and two slice indexes: no lock, no
// allocation.
//
// The result depends only on the set of member names and the Config. Member
// order and Addr do not matter, so every node that sees the same members
// routes every key to the same owner. All nodes of a cluster must therefore
// run with the same Config and a version of this package that agrees on the
// golden vectors in its tests. When a member joins or leaves, about 1/N of the
// keys change owner; the rest stay put.
//
// # Concurrency
//
// A Snapshot never changes after New returns, and any number of goroutines
// may use it without locks. Ring holds the current Snapshot behind an atomic
// pointer: one goroutine (the membership tracker) builds a new Snapshot when
// the member list changes and Stores it; request goroutines Load it once per
// batch. The package starts no goroutines, reads no clock and logs nothing.
package ring

import "sync/atomic"

// Ring holds the current Snapshot. The zero value is ready to use and holds
// nil until the first Store.
//
// Load and Store may be called from any goroutines at the same time; neither
// blocks. The member list and the partition table travel together in one
// Snapshot behind one pointer. That prevents the race two separate fields
// would have: a reader picking up the new table with the old member list
// would index past its end, or route to the wrong member, while a rebuild is
// being published. A caller should Load once per batch and route the whole
// batch with that Snapshot.
//
// Store does not compare versions; ordering is the caller's job. With a single
// goroutine rebuilding snapshots, the last Store is the newest.
type Ring struct {
	cur atomic.Pointer[Snapshot]
}

// Load returns the current Snapshot, or nil if none has been stored.
func (r *Ring) Load() *Snapshot { return r.cur.Load() }

// Store makes s the current Snapshot. Readers that already loaded the
// previous one keep using it safely until they drop it.
func (r *Ring) Store(s *Snapshot) { r.cur.Store(s) }
