// Package bucket implements shardlimiter's bucket algorithms: TOKEN_BUCKET
// as GCRA with an optional Guava-style warm-up, and LEAKY_BUCKET as traffic
// shaping. Each is a pure decision on compact per-key state plus a
// concurrent keyed table (package table) that holds that state for many
// keys. Time is always the caller's now, in Unix nanoseconds.
//
// # The model: GCRA
//
// A rule allows Limit hits per Period with a capacity C (Burst, default
// Limit), so a hit costs T = Period/Limit and a full bucket is τ = C×T. A
// key's whole state is its theoretical arrival time TAT: the instant its
// bucket is full again. A call of n hits at now is admitted when
//
//	max(TAT, now) + n×T ≤ now + τ
//
// and then TAT becomes max(TAT, now) + n×T. T may be well under a
// nanosecond (1e9 hits per millisecond), so no interval is stored: the test
// is done exactly in 128-bit integers, and the stored cost n×T is rounded up
// to whole nanoseconds, which can only under-admit (by at most 1 ns of
// budget per admitted call). Over any span of time a key admits at most
// C + span×Limit/Period hits.
//
// The fields of a decision follow from the debt D = max(TAT, now) − now
// after the call: Remaining = C − ⌈D/T⌉ (how many hits one call could be
// admitted with now), ResetAt = now + D (the bucket is full again),
// RetryAfter = the exact wait until the same call fits (waiting one
// nanosecond less still rejects), or limit.Never when n > C. A peek (hits
// ≤ 0) answers as a call of one hit would and changes nothing.
//
// Rejected hits change nothing unless the rule has limit.CountRejected; then
// they are charged too, but D never exceeds τ + Period: a client that keeps
// hammering is locked out for at most one Period (plus one T) after it
// stops, and its key is full again at most τ + Period later.
// limit.Overdraft charges rejected hits the same way, and makes a peek ask
// only whether the bucket is overdrawn (D > C×T) rather than whether one
// more hit fits. limit.Reset forgets the key's state before the call is
// applied.
//
// # Warm-up
//
// With Warmup W > 0 a key also stores permits that measure how cold it is,
// as Guava's SmoothWarmingUp does with cold factor 3. Spending the stored
// permit at level x costs T up to a threshold of W/(2T) permits, then
// rises linearly to 3T at maxPermits = W/T. The cost of n hits is their
// stable cost plus the integral of that curve above T over the permits they
// spend, so it does not matter how hits are split into calls. Idle time
// after the bucket is full refills stored permits at one per T: a key that
// was idle for W is fully cold again, and a fresh key starts cold.
//
// Admission is tested on the stable cost alone, with the same formula as
// above, and the surcharge is paid by the calls that follow (as in Guava,
// whose first call is never delayed): Remaining, ResetAt and RetryAfter
// mean exactly what they mean without warm-up, and a key never admits more
// than its stable bound. A cold key is admitted at about a third of the
// stable rate and reaches it after W of steady use. Burst still sets the
// capacity: a cold key spends it three times as fast, so it bursts about
// a third of it. Burst 1 gives Guava's behaviour, one call at a time.
//
// # LEAKY_BUCKET
//
// A leaky bucket drains a queue at a constant Limit per Period. Its state is
// the next free slot, and it is GCRA with capacity C = Burst+1 (the queue
// and the slot in service): an admitted call gets Delay = D before the
// call, the time until its slot, and must wait that long before acting.
// With Burst 0 a call is admitted only when the slot is free now, with
// Delay 0 (seed 001's nextAllowedTime). Remaining is the room left counting
// the slot in service, RetryAfter is limit.Never when n > Burst+1, and the
// COUNT_REJECTED bound is the same τ + Period with τ = (Burst+1)×T.
//
// # Rule changes and clocks
//
// A key records the identity of the rule its state was computed under.
// When a call brings another Limit, Period, Burst or warm-up, the key's
// state is rescaled before the call is applied, so the new rule takes
// effect at once without a free burst or a stale lockout: a token bucket
// keeps the fraction of its capacity in use (and a warm-up key its fraction
// of coldness), a leaky bucket keeps the hits in its queue, which drain at
// the new rate.
//
// A clock that steps backwards never admits more: a TAT in the future only
// grows the debt (a step back of Δ holds the key back by at most Δ), a TAT
// in the past is never taken as credit, and the warm-up cools only on time
// that moves forward. Times are clamped to [1, 2^62] ns (1970 to 2116).
//
// # Moving state between nodes
//
// Export encodes a key's state (its TAT, the rule it was computed under,
// and its warm-up permits) into versioned bytes that need no rule to
// read; Import merges such bytes into a key, keeping whichever state has
// consumed more. state.go has the format and the merge rule with its
// argument; transfer.go how an import fences off concurrent takes.
//
// # Concurrency
//
// TokenBucket and LeakyBucket are safe for concurrent use. A take on a key
// whose rule did not change is a lock-free compare-and-swap of one word;
// a rule change, a fresh key or a warm-up take holds the key's mutex for a
// few arithmetic operations. keystate.go writes out the protocol and the
// race it prevents. Sweep retires keys that have been equal to a fresh key
// since one second before its now (the slack covers takes that carry an
// older now than the sweep's); a retired key comes back as a fresh key.
package bucket
