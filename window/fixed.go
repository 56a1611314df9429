package window

import (
	"time"

	"github.com/shardlimiter/shardlimiter/limit"
	"github.com/shardlimiter/shardlimiter/table"
)

// decideFixed applies hits at now under r to a FIXED_WINDOW key in state c
// and returns the new state and the decision. It is pure; it returns c
// itself when nothing changes, so that a peek or a plain rejection writes
// nothing.
func decideFixed(c cell, now int64, r limit.Rule, hits int64) (cell, limit.Decision) {
	now, hits = clampTime(now), max(hits, 0)
	if r.Behavior.Has(limit.Reset) {
		c = cell{}
	}
	p, lim := int64(r.Period), r.Limit
	g := slotExp(p)
	var end, count int64
	if r.Calendar == limit.NoCalendar {
		end, _, _, count = c.at(now, p, g)
	} else {
		end, count = c.calendarAt(now, r.Calendar, g)
	}
	before := count
	ask := peekAsk(hits, r.Behavior)
	d := limit.Decision{ResetAt: end}
	switch {
	case ask <= lim-count:
		d.Allowed = true
		count += hits
	case hits > lim:
		d.RetryAfter = limit.Never
	default:
		// The next window starts empty, so any hits ≤ Limit fit then.
		d.RetryAfter = time.Duration(end - now)
	}
	if !d.Allowed && hits > 0 {
		count = countRejected(count, hits, lim, r.Behavior)
	}
	d.Remaining = max(lim-count, 0)
	if count != before {
		c = cell{g: g, slot: end >> g, cur: count}
	}
	return c, d
}

// calendarAt is cell.at for a rule with a Calendar: it maps c onto the
// calendar's windows at now and returns the end of the window the take
// counts in and the hits counted there. The mapping is the one of "Window
// identity" (slot.go) with calendar boundaries for the multiples of p: the
// counts belong to the first boundary at or after the slot's start. A
// calendar's windows are at least 7 days apart, more than 2^g (g ≤ 49,
// about 6.5 days), so a slot names one window exactly, and that first
// boundary is at most a year (MaxPeriod) after the slot's start, which
// keeps mappedEndBound an upper bound for the sweep.
func (c cell) calendarAt(now int64, cal limit.Calendar, g int64) (end, cur int64) {
	_, end = cal.Window(now)
	if c.g != g || c.cur == 0 {
		return end, 0
	}
	if c.slot == end>>g {
		return end, c.cur // the usual case: this window's counts
	}
	lo := c.slot << g
	m := lo // the first boundary at or after lo
	if start, e := cal.Window(lo); start != lo {
		m = e
	}
	switch {
	case m == end:
		return end, c.cur
	case m > end:
		// The clock went back before the stored window: keep counting in
		// it, so that stepping back never opens a new window.
		return m, c.cur
	}
	return end, 0 // an earlier window: expired
}

// Packed FIXED_WINDOW word, bit 63 always 0 (so never table.Dead):
//
//	62..58  g − minPackedExp (0..30; 31 marks wideWord, see hybrid.go)
//	57..0   slot << (g−4) | count
//
// The slot needs 62−g bits because every window end is below 2^62
// (MaxTime), which leaves g−4 bits for the count: 2^15−1 hits for a period
// of 1 ms (g = 19), 2^25−1 for 1 s (g = 29), every valid Limit (≤ 1e9 <
// 2^30) from 2^34 ns ≈ 17 s on. A word of 0 is a fresh key. A state that
// does not pack — a larger count, or a period under 2^19 ns ≈ 0.52 ms — is
// kept unpacked under the entry's mutex instead (hybrid.go), with the same
// decisions.
const (
	codeShift    = 58
	minPackedExp = 19
	lowMask      = 1<<codeShift - 1
)

// packFixed returns c's word and whether c fits in one.
func packFixed(c cell) (int64, bool) {
	if c.cur == 0 {
		return 0, true
	}
	cb := c.g - 4
	if c.g < minPackedExp || c.cur >= 1<<cb || c.slot >= 1<<(62-c.g) {
		return 0, false
	}
	return (c.g-minPackedExp)<<codeShift | c.slot<<cb | c.cur, true
}

// unpackFixed returns the cell a packed word holds.
func unpackFixed(w int64) cell {
	if w == 0 {
		return cell{}
	}
	g := w>>codeShift + minPackedExp
	cb := g - 4
	return cell{g: g, slot: w & lowMask >> cb, cur: w & (1<<cb - 1)}
}

// freshFixed reports whether a key in state c is equivalent to a fresh key
// at now: its window has ended, under any period of its octave.
func freshFixed(c cell, now int64) bool {
	return c.cur == 0 || mappedEndBound(c.slot, c.g) <= now
}

// idleFixed reports whether a key in state c has been equivalent to a fresh
// key since idleSlack before now.
func idleFixed(c cell, now int64) bool { return freshFixed(c, now-idleSlack) }

// Fixed is the FIXED_WINDOW table: windows aligned to multiples of Period
// since the Unix epoch, or for a rule with a Calendar the calendar's weeks,
// months or years in UTC, each admitting Limit hits.
//
// A key's state is one word updated by compare-and-swap while it packs
// (see packFixed); otherwise it moves under the entry's mutex until it
// packs again. All methods are safe for concurrent use.
type Fixed struct{ hybridTable }

var fixedCodec = codec{
	kind: limit.FixedWindow, pack: packFixed, unpack: unpackFixed, decide: decideFixed,
	idle: idleFixed, fresh: freshFixed, merge: mergeFixed,
}

// NewFixed returns an empty FIXED_WINDOW table.
func NewFixed(cfg table.Config) *Fixed {
	return &Fixed{hybridTable{table.New(cfg, fixedCodec.retire), cfg.TrackChanges}}
}

// Take applies hits to key under r at now (Unix ns). r must be valid.
func (f *Fixed) Take(key string, now int64, r limit.Rule, hits int64) limit.Decision {
	for {
		e := f.t.Lookup(key, now, hits > 0)
		for w := e.Word.Load(); w != table.Dead && w != wideWord; w = e.Word.Load() {
			c, d := decideFixed(unpackFixed(w), now, r, hits)
			nw, ok := packFixed(c)
			if !ok {
				break
			}
			if nw == w {
				return d
			}
			if e.Word.CompareAndSwap(w, nw) {
				if f.track {
					f.t.MarkChanged(key, e)
				}
				return d
			}
		}
		if d, changed, ok := fixedCodec.takeWide(e, now, r, hits); ok {
			if changed && f.track {
				f.t.MarkChanged(key, e)
			}
			return d
		}
	}
}

var _ limit.Limiter = (*Fixed)(nil)
