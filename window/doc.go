// Package window implements the window rate limiters of shardlimiter:
// FIXED_WINDOW, SLIDING_WINDOW (the sliding-window counter) and
// SLIDING_LOG, each as a pure decision on compact per-key state and a
// concurrent keyed table (Fixed, Sliding, Log) that implements
// limit.Limiter.
//
// Time is always a parameter, now, in Unix nanoseconds, clamped into
// [0, MaxTime]. The package reads no clock, logs nothing and starts no
// goroutine.
//
// # Common semantics
//
// A take asks whether key may spend hits under a rule. hits = 0 is a peek:
// it answers as a check of one hit would (Allowed, RetryAfter) and changes
// nothing. Rejected hits consume nothing unless the rule has
// limit.CountRejected; then they are counted as if admitted, so a client
// that keeps hammering stays out, but never beyond Limit: a window's count
// stops at Limit, the log keeps the newest Limit hits. Under
// limit.Overdraft every hit counts, past Limit (a window's count up to
// Limit + MaxHits, the log its newest Limit+1 hits, which decide exactly
// whether it is over), and a peek asks only whether the key is over its
// limit: it is refused while the count exceeds Limit. limit.Reset
// forgets the key's state before the check. hits > Limit can never be
// admitted: RetryAfter is limit.Never. Otherwise a rejection's RetryAfter
// is exact: retried after exactly RetryAfter (nothing else counted
// meanwhile) the same check is admitted; 1 ns earlier it is not (within
// MaxTime, where time stands still). Remaining is in [0, Limit].
//
// A changed rule takes effect at the take that carries it. A clock
// stepping backwards never opens a new window or admits a burst: the take
// counts at the start of the key's stored window (or at its last action,
// for the log). The flip side is that a now far ahead, from a broken
// clock, moves the key to that instant, where it stays until the clock
// gets there or a Reset.
//
// # FIXED_WINDOW
//
// Windows are aligned to multiples of Period since the Unix epoch, or,
// for a rule with a Calendar, are the calendar's weeks (ISO, from Monday),
// months or years in UTC (limit.Calendar.Window); each admits Limit hits. ResetAt is the end of the current window, and a
// rejection's RetryAfter is the time left until then. The model's known
// weakness is the boundary: Limit hits at the end of one window and Limit
// more at the start of the next are all admitted, 2×Limit within a few
// nanoseconds. A take whose now lies before the stored window counts in
// the stored window. A new Limit applies to the current count at once. A
// new Period restarts the count, except that a Period with the same
// ⌊log2 Period⌋ carries it into the new window that overlaps the old one,
// which is conservative (see "Window identity" in slot.go).
//
// # SLIDING_WINDOW
//
// Cloudflare's sliding-window counter keeps the counts of the current
// fixed window and of the one before, and estimates the hits of the last
// Period as prev×(1 − elapsed/Period) + cur, assuming the previous
// window's hits were spread evenly. Hits are admitted when estimate + hits
// ≤ Limit, decided exactly in integers: the estimate is rounded up, never
// down. ResetAt is when the estimate reaches 0; RetryAfter is computed
// from the linear decay of the estimate.
//
// Error bound. Take any span [s, s+Period) starting a fraction f = a/Period
// into window k, with c ≤ Limit hits counted in window k (one rule
// throughout). The span admits at most
// c hits from window k; its part of window k+1 ends before s+Period, so
// its last admission there saw the weighted term c×rem/Period with rem >
// Period − a, and admitted at most Limit − ⌈c(Period−a+1)/Period⌉ hits.
// In all, at most Limit + c×f < Limit×(1+f) hits: never more than
// 2×Limit − 1 in any Period-long span, that is up to Limit − 1 more than
// the exact sliding log, and no more than Limit in any aligned window. The
// bound is tight: Limit hits in the last nanosecond of a window, then
// Limit − 1 spread to the end of the next. On smoother traffic the excess
// is small; TestSlidingAccuracy measures it against the exact log.
//
// # SLIDING_LOG
//
// An exact log: a hit at t counts while now − t < Period, and hits are
// admitted when the counted hits plus hits are at most Limit. Every
// Period-long span admits at most Limit hits. With a MinInterval, an
// action is also rejected until MinInterval has passed since the previous
// recorded action. One take is one action: its hits are recorded together
// at one instant, so MinInterval spaces takes, not hits. ResetAt is when
// the newest counted hit leaves the window (now for an empty log).
// RetryAfter is when enough of the oldest counted hits have left, and the
// interval has passed. A changed Limit or Period applies to the counted
// hits at once; a key is forgotten, at the latest, Period (or MinInterval,
// if longer) of the rule that recorded its last action after that action.
//
// Memory is one 16-byte run per action (a take: its instant and its hits,
// however many), in a buffer grown on demand by doubling (a key that took
// twice holds 2 runs) and bounded by limit.MaxLogEntries runs, 1 MiB, which
// Limit cannot exceed. The buffer is charged to the table's byte budget
// (table.Budget) as it grows. Under CountRejected the log keeps only the
// newest Limit hits: rejected hits push out the oldest (a run may be cut),
// which changes no decision, since at any later instant the counted hits
// are the newest ones and Limit counted hits reject everything.
//
// # Moving state between nodes
//
// Export encodes a key's state (a window and its counts, or a log's
// runs) into versioned bytes that need no rule to read; Import
// merges such bytes into a key, keeping whichever state has consumed
// more. state.go and logstate.go have the formats and the merge rules with
// their arguments; transfer.go how an import meets concurrent takes.
//
// # Concurrency
//
// Fixed and Sliding keep a key's state in one 64-bit word updated by
// compare-and-swap while its counts fit (see packFixed and packSliding for
// the bounds); a key whose state does not fit moves under its entry's
// mutex, with the same decisions, and back when it fits again (hybrid.go).
// Log keeps a key's state under its entry's mutex. Takes never run
// anything slow under a lock. Sweep retires keys that have been
// equivalent to a fresh key for at least a second; the table package's
// retirement protocol keeps a concurrent take from updating a retired
// entry. All methods of the tables are safe for concurrent use.
package window
