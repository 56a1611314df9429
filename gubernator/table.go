package gubernator

import (
	"time"

	"github.com/shardlimiter/shardlimiter/limit"
	"github.com/shardlimiter/shardlimiter/table"
)

// Table is the limiter of both gubernator algorithms: one table of Items,
// keyed by the node's table key. Its Take dispatches on the rule's
// algorithm; its StateMover methods move every key, whichever algorithm
// created it. Safe for concurrent use.
type Table struct {
	t     *table.Table[Item]
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

// retire retires an entry that is fresh at now (Unix ns).
func retire(e *table.Entry[Item], now int64) bool {
	ms := now / int64(time.Millisecond)
	return e.RetireLockedIf(func(it *Item) bool { return it.Expired(ms) })
}

// Take applies hits to key under r at now (Unix ns) and returns the
// decision: Allowed is UNDER_LIMIT, ResetAt gubernator's reset_time in
// nanoseconds (saturated), RetryAfter and Delay 0. r must be valid and of
// a gubernator algorithm.
func (g *Table) Take(key string, now int64, r limit.Rule, hits int64) limit.Decision {
	c := limit.Check{Hits: hits, Rule: r}
	req := RequestOf(&c)
	e := g.lockLive(key, now)
	before := e.State
	resp := Take(&e.State, now/int64(time.Millisecond), req)
	changed := e.State != before
	e.Mu.Unlock()
	if changed && g.track {
		g.t.MarkChanged(key, e)
	}
	return decision(resp)
}

// lockLive returns key's live entry, inserted when absent, with its mutex
// held: a retired entry is looked up again (see package table).
func (g *Table) lockLive(key string, now int64) *table.Entry[Item] {
	for {
		e := g.t.Get(key, now)
		e.Mu.Lock()
		if !e.Dead() {
			return e
		}
		e.Mu.Unlock()
	}
}

func decision(r Response) limit.Decision {
	return limit.Decision{Allowed: !r.Over, Remaining: r.Remaining, ResetAt: limit.MillisToNanos(r.ResetTime)}
}

// Sweep retires up to about budget keys that are fresh at now (Unix ns):
// expired, or reset. It returns how many it removed.
func (g *Table) Sweep(now int64, budget int) int { return g.t.Sweep(now, budget) }

// Len returns how many keys are held.
func (g *Table) Len() int { return g.t.Len() }

// Evicted returns how many keys were evicted to respect the key cap.
func (g *Table) Evicted() uint64 { return g.t.Evicted() }

// Bytes returns the bytes charged for the keys held.
func (g *Table) Bytes() int64 { return g.t.Bytes() }

// EvictedForBytes returns how many keys were evicted to respect the byte
// budget.
func (g *Table) EvictedForBytes() uint64 { return g.t.EvictedForBytes() }

// Delete removes key and reports whether it was held.
func (g *Table) Delete(key string) bool { return g.t.Delete(key) }

// Range calls fn with every key held until fn returns false, with no lock
// held while fn runs.
func (g *Table) Range(fn func(key string) bool) { g.t.Range(fn) }

// Changed calls fn with up to max keys changed since they were last handed
// out (see limit.StateMover).
func (g *Table) Changed(max int, fn func(key string)) int { return g.t.DrainChanged(max, fn) }

// TrackChanges turns change tracking on or off.
func (g *Table) TrackChanges(on bool) { g.t.SetTrackChanges(on) }

// Leaky returns the view of g the node files under
// limit.GubernatorLeakyBucket: it takes like g, and moves nothing (its
// StateMover methods see no key, its Sweep sweeps nothing), so that a node
// that walks its limiters one by one moves and sweeps the shared table
// once, under g.
func (g *Table) Leaky() *LeakyView { return &LeakyView{g} }

// LeakyView is the second face of a Table; see Table.Leaky.
type LeakyView struct{ g *Table }

var _ limit.Limiter = (*LeakyView)(nil)

// Take is Table.Take.
func (v *LeakyView) Take(key string, now int64, r limit.Rule, hits int64) limit.Decision {
	return v.g.Take(key, now, r, hits)
}

// Import merges into the shared table (a state filed under this view's
// algorithm is a gubernator key like any other).
func (v *LeakyView) Import(key string, state []byte, now int64, mark bool) error {
	return v.g.Import(key, state, now, mark)
}

func (*LeakyView) Sweep(int64, int) int                               { return 0 }
func (*LeakyView) Len() int                                           { return 0 }
func (*LeakyView) Evicted() uint64                                    { return 0 }
func (*LeakyView) Bytes() int64                                       { return 0 }
func (*LeakyView) EvictedForBytes() uint64                            { return 0 }
func (*LeakyView) Export(string, int64) ([]byte, bool)                { return nil, false }
func (*LeakyView) Range(func(string) bool)                            {}
func (*LeakyView) Delete(string) bool                                 { return false }
func (*LeakyView) Changed(int, func(string)) int                      { return 0 }
func (*LeakyView) ExportChanged(int, int64, func(string, []byte)) int { return 0 }
func (*LeakyView) TrackChanges(bool)                                  {}
