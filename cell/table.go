package cell

import (
	"time"

	"github.com/shardlimiter/shardlimiter/limit"
	"github.com/shardlimiter/shardlimiter/table"
)

// idleSlack is how long a key's tat must have been in the past before
// Sweep retires it: the node reads the clock for a batch before its takes
// run, so a take may carry a now a little older than the sweep's.
const idleSlack = int64(time.Second)

// Table is the Cell limiter: one tat per key, guarded by the key's entry
// mutex. Safe for concurrent use.
type Table struct {
	t     *table.Table[int64]
	track bool // table.Config.TrackChanges
}

var (
	_ limit.Limiter    = (*Table)(nil)
	_ limit.StateMover = (*Table)(nil)
)

// NewTable returns an empty table sized by cfg.
func NewTable(cfg table.Config) *Table {
	return &Table{t: table.New(cfg, retire), track: cfg.TrackChanges}
}

func retire(e *table.Entry[int64], now int64) bool {
	return e.RetireLockedIf(func(tat *int64) bool { return *tat <= now-idleSlack })
}

// Take applies hits (the quantity) to key under r at now (Unix ns) and
// returns the decision as Reply.Decision dresses it. r must be a valid
// Cell rule and hits valid for it (limit.Check.Validate).
func (c *Table) Take(key string, now int64, r limit.Rule, hits int64) limit.Decision {
	q := QuotaOf(r)
	e := c.lockLive(key, now)
	tat, reply := q.Throttle(e.State, now, hits)
	changed := tat != e.State
	e.State = tat
	e.Mu.Unlock()
	if changed && c.track {
		c.t.MarkChanged(key, e)
	}
	return reply.Decision(now)
}

// lockLive returns key's live entry, inserted when absent, with its mutex
// held: a retired entry is looked up again (see package table).
func (c *Table) lockLive(key string, now int64) *table.Entry[int64] {
	for {
		e := c.t.Get(key, now)
		e.Mu.Lock()
		if !e.Dead() {
			return e
		}
		e.Mu.Unlock()
	}
}

// Sweep retires up to about budget keys whose tat is past at now.
func (c *Table) Sweep(now int64, budget int) int { return c.t.Sweep(now, budget) }

// Len returns how many keys are held.
func (c *Table) Len() int { return c.t.Len() }

// Evicted returns how many keys were evicted to respect the key cap.
func (c *Table) Evicted() uint64 { return c.t.Evicted() }

// Bytes returns the bytes charged for the keys held.
func (c *Table) Bytes() int64 { return c.t.Bytes() }

// EvictedForBytes returns how many keys were evicted to respect the byte
// budget.
func (c *Table) EvictedForBytes() uint64 { return c.t.EvictedForBytes() }

// Delete removes key and reports whether it was held.
func (c *Table) Delete(key string) bool { return c.t.Delete(key) }

// Range calls fn with every key held until fn returns false.
func (c *Table) Range(fn func(key string) bool) { c.t.Range(fn) }

// Changed calls fn with up to max keys changed since they were last
// handed out (see limit.StateMover).
func (c *Table) Changed(max int, fn func(key string)) int { return c.t.DrainChanged(max, fn) }

// TrackChanges turns change tracking on or off.
func (c *Table) TrackChanges(on bool) { c.t.SetTrackChanges(on) }
