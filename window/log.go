package window

import (
	"time"

	"github.com/shardlimiter/shardlimiter/limit"
	"github.com/shardlimiter/shardlimiter/table"
)

// logState is one SLIDING_LOG key: the actions whose hits it counts,
// oldest first, one run (an instant and its hits) per action, whatever
// its hits. The zero logState is a fresh key. Its methods need the
// entry's mutex held.
//
// Expired runs are dropped only when hits are recorded, so a key that has
// recorded anything holds at least the last action's run: the newest one,
// which MinInterval is measured from.
type logState struct {
	runs
	// idleAt is 0 for a fresh key; otherwise the instant from which the
	// key is equivalent to a fresh one: its last action + max(Period,
	// MinInterval) under the rule of that action. From then on a take
	// treats it as fresh, whether or not the sweep has run.
	idleAt int64
}

// last returns the instant of the last recorded action; idleAt must be
// non-zero.
func (s *logState) last() int64 { return s.newest() }

// heapBytes returns the bytes s holds on the heap beyond the logState
// itself: its run buffer, at most limit.MaxLogEntries runs (1 MiB). The
// entry's mutex must be held.
func (s *logState) heapBytes() int64 { return s.runs.heapBytes() }

// HeapBytes makes *logState a table.StateSizer: the table credits the
// buffer back when the key goes.
func (s *logState) HeapBytes() int64 { return s.heapBytes() }

// take applies hits at now under r and returns the decision. The caller
// holds the entry's mutex.
//
// A hit at t counts while now − t < Period. hits are admitted when the
// counted hits plus hits are at most Limit and, with a MinInterval, at
// least MinInterval has passed since the last recorded action. One take is
// one action: its hits are recorded together, at one instant.
func (s *logState) take(now int64, r limit.Rule, hits int64) limit.Decision {
	now, hits = clampTime(now), max(hits, 0)
	if r.Behavior.Has(limit.Reset) || s.idleAt != 0 && now >= s.idleAt {
		s.clear()
	}
	at := now // the instant the take counts at
	if s.idleAt != 0 {
		// A clock stepped back counts as the last action's instant: the
		// window never slides backwards, runs stay sorted.
		at = max(at, s.last())
	}
	p, lim, mi := int64(r.Period), r.Limit, int64(r.MinInterval)
	k := s.firstAfter(at - p) // the oldest counted run
	n := s.hitsFrom(k)        // the counted hits
	ask := peekAsk(hits, r.Behavior)
	d := limit.Decision{Allowed: ask <= lim-n && (s.idleAt == 0 || at-s.last() >= mi)}
	if hits > 0 && (d.Allowed || r.Behavior&(limit.CountRejected|limit.Overdraft) != 0) {
		// The newest keep hits decide every later take exactly: Limit of
		// them reject everything, and under Overdraft Limit+1 of them
		// tell that the key is over.
		keep := lim
		if r.Behavior.Has(limit.Overdraft) {
			keep = lim + 1
		}
		s.record(at, min(hits, keep), k, max(keep, n), max(p, mi))
		k, n = 0, s.hitsFrom(0)
	}
	d.Remaining = max(lim-n, 0)
	d.ResetAt = now
	if n > 0 {
		d.ResetAt = min(s.newest()+p, s.idleAt)
	}
	if !d.Allowed {
		d.RetryAfter = limit.Never
		if ask <= lim {
			d.RetryAfter = time.Duration(s.retryAt(at, k, n, p, lim-ask, mi) - now)
		}
	}
	return d
}

// record drops the k expired runs and records h hits at t, keeping at
// most bound (≥ h) hits: under COUNT_REJECTED the oldest give way, the
// oldest run they leave losing part of its hits if need be. Keeping only
// the newest Limit hits changes no decision: the hits counted at any later
// instant are the newest ones, and once Limit of them are counted every
// check is rejected anyway.
func (s *logState) record(t int64, h int64, k int, bound, idleAfter int64) {
	s.drop(k)
	s.push(t, h, bound)
	s.idleAt = t + idleAfter
}

// retryAt returns the first instant at which a check of lim−need hits
// passes: once the n counted hits (the oldest in run k) have fallen to
// need and MinInterval has passed since the last action, or once the key
// has gone idle. Exact: at that instant the check passes, one ns earlier
// it fails.
func (s *logState) retryAt(at int64, k int, n, p, need, mi int64) int64 {
	t := at
	if n > need {
		// The run that holds the (n−need)-th oldest counted hit must
		// leave the window.
		t = max(t, s.at(s.holding(k, n-need)).t+p)
	}
	if s.idleAt != 0 {
		t = max(t, s.last()+mi)
		t = min(t, s.idleAt)
	}
	return t
}

// clear makes s a fresh key.
func (s *logState) clear() {
	s.reset()
	s.idleAt = 0
}

// idle reports whether s has been equivalent to a fresh key since
// idleSlack before now.
func (s *logState) idle(now int64) bool { return s.idleAt == 0 || s.idleAt <= now-idleSlack }

// Log is the SLIDING_LOG table: an exact log of the actions whose hits
// each key counts, one run of 16 bytes per action and at most Limit (≤
// limit.MaxLogEntries) runs per key, with an optional minimum interval
// between actions.
//
// A key's state is guarded by its entry's mutex; nothing else runs under
// it. All methods are safe for concurrent use.
type Log struct {
	t     *table.Table[logState]
	track bool // table.Config.TrackChanges: see hybridTable
}

// NewLog returns an empty SLIDING_LOG table.
func NewLog(cfg table.Config) *Log {
	return &Log{t: table.New(cfg, retireLog), track: cfg.TrackChanges}
}

func retireLog(e *table.Entry[logState], now int64) bool {
	return e.RetireLockedIf(func(s *logState) bool { return s.idle(now) })
}

// Take applies hits to key under r at now (Unix ns). r must be valid.
func (l *Log) Take(key string, now int64, r limit.Rule, hits int64) limit.Decision {
	for {
		e := l.t.Lookup(key, now, hits > 0)
		e.Mu.Lock()
		if !e.Dead() {
			idleAt, size := e.State.idleAt, e.State.heapBytes()
			d := e.State.take(now, r, hits)
			// The state changed when hits were recorded or the log was
			// cleared (every record or clear moves idleAt but a record at
			// the same instant under the same rule).
			changed := e.State.idleAt != idleAt || hits > 0 && (d.Allowed || r.Behavior.Has(limit.CountRejected))
			// Charged under the mutex, so that the key's retirement
			// credits exactly what was charged (table.StateSizer).
			grown := e.State.heapBytes() - size
			if grown != 0 { // usually not: the buffer has room
				l.t.AddStateBytes(grown)
			}
			e.Mu.Unlock()
			if grown > 0 {
				l.t.Reclaim(e)
			}
			if changed && l.track {
				l.t.MarkChanged(key, e)
			}
			return d
		}
		e.Mu.Unlock()
	}
}

// Sweep retires up to about budget keys that have been idle for at least a
// second at now, and returns how many it removed.
func (l *Log) Sweep(now int64, budget int) int { return l.t.Sweep(clampTime(now), budget) }

// Warm brings into the caches the entries that takes of keys will look up
// (table.Table.Warm): call it with the keys of the next few checks of a
// batch.
func (l *Log) Warm(keys []string) { l.t.Warm(keys) }

// Len returns how many keys are held.
func (l *Log) Len() int { return l.t.Len() }

// Evicted returns how many keys were evicted to respect the key cap.
func (l *Log) Evicted() uint64 { return l.t.Evicted() }

// Bytes returns the bytes charged for the keys held.
func (l *Log) Bytes() int64 { return l.t.Bytes() }

// EvictedForBytes returns how many keys were evicted to respect the byte
// budget.
func (l *Log) EvictedForBytes() uint64 { return l.t.EvictedForBytes() }

var _ limit.Limiter = (*Log)(nil)
