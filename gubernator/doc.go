// Package gubernator implements the two algorithms of gubernator's API
// (gubernator-io/gubernator v2, pb.gubernator.V1) with their semantics,
// for shardlimiter's drop-in of that API (docs/GUBERNATOR.md). They are
// not shardlimiter's own token and leaky buckets:
//
//   - TOKEN_BUCKET is a window anchored at the key's first hit that does
//     not refill: remaining = limit − hits so far, reset_time = the first
//     hit's created_at plus duration; the key starts over once the window
//     has expired.
//   - LEAKY_BUCKET is a balance of burst (default limit) that regains one
//     hit per duration/limit, credited only when at least one whole hit has
//     leaked since the last credit.
//
// Both keep gubernator's edge rules: hits beyond what is left are refused
// without consuming (DRAIN_OVER_LIMIT empties the key instead), hits 0
// reports, negative hits refund, a changed limit or duration adjusts a live
// key, RESET_REMAINING, DURATION_IS_GREGORIAN (calendar units in UTC),
// created_at, limit 0 and duration 0. algorithms.go states each rule where
// it is applied.
//
// # Time
//
// Two instants enter a decision, as in gubernator: now, the deciding
// node's clock, decides whether a key has expired and where a Gregorian
// period ends; the request's created_at (now when absent) anchors windows
// and leaks. Both are parameters: the package reads no clock, logs nothing
// and starts no goroutine.
//
// # Table and moving state
//
// Table holds both algorithms' keys in one table.Table, since gubernator
// keeps one item per key whatever the algorithm (a request of the other
// algorithm replaces it). Table.Leaky is a second view of the same table
// for the node's per-algorithm dispatch. Keys move between nodes with
// Export and Import like every other algorithm's (transfer.go); when two
// states of a key meet, the one that has consumed more wins.
//
// # Concurrency
//
// A key's state is guarded by its entry's mutex; every Table method is
// safe for concurrent use.
package gubernator
