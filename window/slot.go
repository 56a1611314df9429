package window

import (
	"math/bits"
	"time"

	"github.com/shardlimiter/shardlimiter/limit"
)

// MaxTime is the latest instant (Unix ns, in the year 2113) the package
// computes with: every now is clamped into [0, MaxTime]. It keeps a window
// end plus a period below 2^62, which the packed words rely on (fixed.go).
const MaxTime = 1<<62 - 1<<56

// idleSlack is how long a key must have been indistinguishable from a fresh
// key before Sweep retires it. The node reads the clock for a batch of
// takes before running them and the sweep reads it again later, so a take
// may carry a now slightly older than the sweep's; retiring a key that is
// idle at the sweep's now but not at the take's would hand that take a
// fresh window early. (The bucket package uses the same slack.)
const idleSlack = int64(time.Second)

func clampTime(now int64) int64 { return min(max(now, 0), MaxTime) }

// Window identity.
//
// Windows of period p end at multiples of p. A key's state records the end
// E of the window its counts belong to as a slot: E >> g, with
// g = slotExp(p) ≤ log2(p). Two windows of one period are at least 2^g
// apart, so their slots differ: the slot identifies the window exactly,
// for any now, and never wraps. It also tells the sweep, which does not
// know the rule, when the window ended (to within 2^g).
//
// A take maps the stored counts to one window of its own rule: the first
// one ending at or after lo = slot << g, the slot's start. With the Period
// unchanged that is the stored window itself. The take then sees that
// window as its current window, the previous one (SLIDING_WINDOW), an
// expired one, or one ahead of now (the clock went backwards: see
// cell.at). A Period of another octave (another g) restarts the state. A
// new Period of the same octave maps the counts to the first window of the
// new period ending at or after lo; since E − Period < lo ≤ E, that window
// overlaps the stored one. Counts carry over only into a window that
// overlaps the one they were counted in, which is conservative, and lapse
// with it.

// maxSlotExp caps g, so that long periods keep more bits for counts; any
// g ≤ log2(p) identifies windows.
const maxSlotExp = 49

// slotExp returns g for period p: ⌊log2 p⌋, at most maxSlotExp.
func slotExp(p int64) int64 { return min(int64(bits.Len64(uint64(p)))-1, maxSlotExp) }

// maxPeriodOf returns the longest period whose slot exponent is g.
func maxPeriodOf(g int64) int64 {
	if g >= maxSlotExp {
		return int64(limit.MaxPeriod)
	}
	return 1<<(g+1) - 1
}

// mappedEndBound bounds the end of any window a take can map the counts of
// slot (at exponent g) to: the first multiple of a period of the octave at
// or after the slot's start.
func mappedEndBound(slot, g int64) int64 { return slot<<g + maxPeriodOf(g) }

// cell is the unpacked state of one FIXED_WINDOW or SLIDING_WINDOW key: the
// counts of the window recorded in slot, and (sliding only) of the window
// before it. The zero cell is a fresh key. Packed words (fixed.go,
// sliding.go) hold the same information.
type cell struct {
	g    int64 // slot exponent of the period the cell was written under
	slot int64 // end >> g of the window cur counts
	prev int64 // hits counted in the window before it (SLIDING_WINDOW)
	cur  int64 // hits counted in the window
}

// at maps c onto the windows of period p (slot exponent g) at now (see
// "Window identity"). It returns the end of the window the take counts in,
// the instant it counts at, and the counts it sees in that window and in
// the one before. The instant is now, unless the stored window lies ahead
// of now: the clock went backwards past its start, and the take counts as
// made at that start, so that stepping the clock back never opens a new
// window.
func (c cell) at(now, p, g int64) (end, at, prev, cur int64) {
	end = (now/p + 1) * p
	if c.g != g || c.cur == 0 && c.prev == 0 {
		return end, now, 0, 0
	}
	switch m := c.windowEnd(end, p); {
	case m == end:
		return end, now, c.prev, c.cur
	case m == end-p:
		return end, now, c.cur, 0
	case m > end:
		return m, m - p, c.prev, c.cur
	}
	return end, now, 0, 0
}

// windowEnd returns the end of the window of period p (of c's octave) that
// c's counts belong to: the first multiple of p at or after c's slot start.
// end is the end of the window at the take's now; the usual cases, the
// same or the previous window, need no division.
func (c cell) windowEnd(end, p int64) int64 {
	lo := c.slot << c.g
	switch {
	case c.slot == end>>c.g:
		return end // end is in the slot and end−p < lo: the first multiple
	case c.slot == (end-p)>>c.g:
		return end - p
	case lo <= end-2*p:
		return lo // expired: any instant before end−p will do
	}
	return (lo + p - 1) / p * p
}

// peekAsk is the hits a take of hits is decided as: hits itself, except
// that a peek (0 hits) answers as a check of one hit would, or under
// limit.Overdraft asks only whether the key is over its limit.
func peekAsk(hits int64, b limit.Behavior) int64 {
	if hits == 0 && !b.Has(limit.Overdraft) {
		return 1
	}
	return hits
}

// maxCount bounds a window's count: Limit + MaxHits, reached only under
// limit.Overdraft.
const maxCount = limit.MaxLimit + limit.MaxHits

// countRejected is a window's count after hits that were rejected at
// count under limit lim and behavior b: unchanged, unless b counts them.
// CountRejected counts them up to the limit (a count at the limit already
// rejects everything until the window ends); Overdraft counts them in
// full, up to maxCount.
func countRejected(count, hits, lim int64, b limit.Behavior) int64 {
	switch {
	case b.Has(limit.Overdraft):
		return max(count, min(count+hits, maxCount))
	case b.Has(limit.CountRejected):
		return max(count, min(count+hits, lim))
	}
	return count
}
