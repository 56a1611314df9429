package window

import (
	"github.com/shardlimiter/shardlimiter/limit"
	"github.com/shardlimiter/shardlimiter/table"
)

// Credit gives back to key, under r at now, up to hits that a lease took
// and did not use (peer/lease.go): they leave the count of the window now
// is in, never more than it counts, and never of another window. The
// caller credits only hits taken in that same window (a lease ends with
// its window): a hit taken in an earlier window has left the count with
// it. It returns the hits credited.
//
// Credits are rare (one per lease end), so they take the entry's mutex
// whatever the form of its state; a lock-free take that changes a packed
// word meanwhile makes the credit start over (store).
func (f *Fixed) Credit(key string, now int64, r limit.Rule, hits int64) int64 {
	return fixedCodec.credit(f.hybridTable, key, now, r, hits)
}

// Credit is Fixed.Credit for SLIDING_WINDOW: the hits leave the current
// window's count; the previous window's, which the estimate weighs, is
// never touched.
func (s *Sliding) Credit(key string, now int64, r limit.Rule, hits int64) int64 {
	return slidingCodec.credit(s.hybridTable, key, now, r, hits)
}

func (k *codec) credit(h hybridTable, key string, now int64, r limit.Rule, hits int64) int64 {
	if hits <= 0 || r.Behavior != 0 {
		return 0
	}
	now = clampTime(now)
	e := h.t.Lookup(key, now, false)
	for {
		e.Mu.Lock()
		w := e.Word.Load()
		if w == table.Dead {
			e.Mu.Unlock()
			return 0
		}
		c := wideOrPacked(e, w, k.unpack)
		nc, n := creditCell(c, now, r, hits)
		if n == 0 {
			e.Mu.Unlock()
			return 0
		}
		ok := k.store(e, w, nc)
		e.Mu.Unlock()
		if ok {
			if h.track {
				h.t.MarkChanged(key, e)
			}
			return n
		}
	}
}

// creditCell takes up to hits off the count of c's window at now and
// returns the new cell and the hits taken off.
func creditCell(c cell, now int64, r limit.Rule, hits int64) (cell, int64) {
	p := int64(r.Period)
	g := slotExp(p)
	var end, prev, cur int64
	if r.Calendar == limit.NoCalendar {
		end, _, prev, cur = c.at(now, p, g)
	} else {
		end, cur = c.calendarAt(now, r.Calendar, g)
	}
	n := min(hits, cur)
	if n <= 0 {
		return c, 0
	}
	return cell{g: g, slot: end >> g, prev: prev, cur: cur - n}, n
}

// End returns the end of the window of r (FIXED_WINDOW or SLIDING_WINDOW)
// that now is in (Unix ns): when a lease granted at now ends at the
// latest.
func End(r limit.Rule, now int64) int64 {
	now = clampTime(now)
	if r.Calendar != limit.NoCalendar {
		_, end := r.Calendar.Window(now)
		return end
	}
	p := int64(r.Period)
	return (now/p + 1) * p
}
