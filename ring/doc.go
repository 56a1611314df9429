// Package ring implements the key→owner map of a shardlimiter cluster: an
// immutable Snapshot, built from the member list, that tells every node which
// member owns a rate-limit key.
//
// # Model
//
// The key space is cut into a fixed number of partitions
// (Config.PartitionCount); a key belongs to partition xxhash(key) mod
// PartitionCount. Partitions are placed on members by consistent hashing with
// bounded loads (the algorithm of github.com/buraksezer/consistent v1.0.0,
// owner for owner, computed in place.go without the library's sort per
// member; hashed with github.com/cespare/xxhash/v2): each member appears ReplicationFactor times
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
// may use it without locks. The node keeps the current Snapshot behind an
// atomic pointer, together with its own index in it: one goroutine (the
// membership watcher) builds a new Snapshot when the member list changes and
// stores it; request goroutines load it once per batch, so the member list
// and the partition table a batch routes with always belong together. The
// package starts no goroutines, reads no clock and logs nothing.
package ring
