// Package cell implements redis-cell's rate limiter, the GCRA behind its
// CL.THROTTLE command, with that module's arithmetic, for shardlimiter's
// Redis protocol (docs/REDIS.md). It is not shardlimiter's TOKEN_BUCKET
// (package bucket), whose answers differ in three places:
//
//   - the emission interval is period ÷ count in float64, truncated to a
//     nanosecond (TOKEN_BUCKET rounds it up);
//   - a peek (quantity 0) is limited only when the bucket is overdrawn,
//     never merely because it is empty (TOKEN_BUCKET asks whether one hit
//     would fit);
//   - remaining is counted in whole microseconds, and the reply's
//     durations are whole seconds, rounded up when their millisecond part
//     is not 0.
//
// # Model
//
// A key holds one int64, its theoretical arrival time (tat), in Unix
// nanoseconds; a tat in the past is a full bucket. With T the emission
// interval and τ = T × (max_burst+1) the bucket's size in time, quantity
// q at now is admitted when max(tat, now) + T×q − τ ≤ now, and then tat
// becomes max(tat, now) + T×q. The rule comes with every call and is not
// stored: calls with another rule reuse the tat, as redis-cell does.
//
// # Time, state, concurrency
//
// now is a parameter: the package reads no clock, logs nothing and starts
// no goroutine. Keys move between nodes with Export and Import like every
// other algorithm's (transfer.go); of two states of a key, the later tat
// (the one that consumed more) wins. Every Table method is safe for
// concurrent use; a key's tat is guarded by its entry's mutex.
package cell
