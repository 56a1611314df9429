package window

import (
	"time"

	"github.com/shardlimiter/shardlimiter/internal/wide"
	"github.com/shardlimiter/shardlimiter/limit"
	"github.com/shardlimiter/shardlimiter/table"
)

// decideSliding applies hits at now under r to a SLIDING_WINDOW key in
// state c and returns the new state and the decision. It is pure; it
// returns c itself when nothing changes.
//
// The estimate at now, rem = end − now ns before the current window ends,
// is prev×rem/p + cur. Hits are admitted when estimate + hits ≤ Limit,
// compared exactly in integers (prev×rem ≤ (Limit−cur−hits)×p), which is
// the same as rounding the weighted part up: the estimate never
// under-counts.
func decideSliding(c cell, now int64, r limit.Rule, hits int64) (cell, limit.Decision) {
	now, hits = clampTime(now), max(hits, 0)
	if r.Behavior.Has(limit.Reset) {
		c = cell{}
	}
	lim, p := r.Limit, int64(r.Period)
	g := slotExp(p)
	end, at, prev, cur := c.at(now, p, g)
	weighted := wide.MulDivCeil(prev, end-at, p) // ≤ prev
	before := cur
	ask := peekAsk(hits, r.Behavior)
	var d limit.Decision
	if ask <= lim-weighted-cur {
		d.Allowed = true
		cur += hits
	} else if hits > 0 {
		cur = countRejected(cur, hits, lim, r.Behavior)
	}
	d.Remaining = max(lim-weighted-cur, 0)
	d.ResetAt = now
	switch {
	case cur > 0:
		d.ResetAt = end + p // when the next window is over
	case prev > 0:
		d.ResetAt = end
	}
	if !d.Allowed {
		d.RetryAfter = limit.Never
		if ask <= lim {
			d.RetryAfter = time.Duration(slidingRetryAt(end, at, p, prev, cur, lim-ask) - now)
		}
	}
	if cur != before {
		c = cell{g: g, slot: end >> g, prev: prev, cur: cur}
	}
	return c, d
}

// slidingRetryAt returns the first instant at which the estimate is at most
// need, if nothing more is counted. The estimate falls linearly: within the
// current window prev×(end−t)/p + cur, within the next cur×(end+p−t)/p,
// then 0. Solving each for t and rounding up to the next nanosecond makes
// the answer exact: at that instant the check passes, one ns before it
// fails. Called only when the estimate at at exceeds need.
func slidingRetryAt(end, at, p, prev, cur, need int64) int64 {
	if cur <= need {
		// In the current window: prev×(end−t) ≤ (need−cur)×p.
		if prev == 0 {
			return at
		}
		return end - min(wide.MulDivFloor(need-cur, p, prev), end-at)
	}
	// In the next window: cur×(end+p−t) ≤ need×p, with need < cur.
	return end + p - wide.MulDivFloor(need, p, cur)
}

// Packed SLIDING_WINDOW word, bit 63 always 0:
//
//	62..58  g − minPackedExp (0..30; 31 marks wideWord)
//	57..0   slot << 2b | prev << b | cur,  b = ⌊(g−4)/2⌋
//
// Lock-free while both counts are below 2^b: 127 for a 1 ms period,
// 4,095 for 1 s, 32,767 for 1 min, 262,143 for 1 h, 2,097,151 for 1 day,
// 4,194,303 from about a week on. Larger counts and periods under 2^19 ns
// take the mutex path (hybrid.go) with the same decisions.
func slidingBits(g int64) int64 { return (g - 4) / 2 }

// packSliding returns c's word and whether c fits in one.
func packSliding(c cell) (int64, bool) {
	if c.cur == 0 && c.prev == 0 {
		return 0, true
	}
	b := slidingBits(c.g)
	if c.g < minPackedExp || c.cur >= 1<<b || c.prev >= 1<<b || c.slot >= 1<<(62-c.g) {
		return 0, false
	}
	return (c.g-minPackedExp)<<codeShift | c.slot<<(2*b) | c.prev<<b | c.cur, true
}

// unpackSliding returns the cell a packed word holds.
func unpackSliding(w int64) cell {
	if w == 0 {
		return cell{}
	}
	g := w>>codeShift + minPackedExp
	b := slidingBits(g)
	mask := int64(1)<<b - 1
	return cell{g: g, slot: w & lowMask >> (2 * b), prev: w >> b & mask, cur: w & mask}
}

// freshSliding reports whether a key in state c is equivalent to a fresh
// key at now: one whole period (the longest of its octave) after its
// window ended, the estimate is 0.
func freshSliding(c cell, now int64) bool {
	return c.cur == 0 && c.prev == 0 || mappedEndBound(c.slot, c.g)+maxPeriodOf(c.g) <= now
}

// idleSliding reports whether a key in state c has been equivalent to a
// fresh key since idleSlack before now.
func idleSliding(c cell, now int64) bool { return freshSliding(c, now-idleSlack) }

// Sliding is the SLIDING_WINDOW table: Cloudflare's sliding-window counter,
// which weighs the previous fixed window's count by the part of it the
// sliding period still covers. See the package doc for its error bound.
//
// A key's state is one word updated by compare-and-swap while it packs
// (see packSliding); otherwise it moves under the entry's mutex until it
// packs again. All methods are safe for concurrent use.
type Sliding struct{ hybridTable }

var slidingCodec = codec{
	kind: limit.SlidingWindow, pack: packSliding, unpack: unpackSliding, decide: decideSliding,
	idle: idleSliding, fresh: freshSliding, merge: mergeSliding,
}

// NewSliding returns an empty SLIDING_WINDOW table.
func NewSliding(cfg table.Config) *Sliding {
	return &Sliding{hybridTable{table.New(cfg, slidingCodec.retire), cfg.TrackChanges}}
}

// Take applies hits to key under r at now (Unix ns). r must be valid.
func (s *Sliding) Take(key string, now int64, r limit.Rule, hits int64) limit.Decision {
	for {
		e := s.t.Lookup(key, now, hits > 0)
		for w := e.Word.Load(); w != table.Dead && w != wideWord; w = e.Word.Load() {
			c, d := decideSliding(unpackSliding(w), now, r, hits)
			nw, ok := packSliding(c)
			if !ok {
				break
			}
			if nw == w {
				return d
			}
			if e.Word.CompareAndSwap(w, nw) {
				if s.track {
					s.t.MarkChanged(key, e)
				}
				return d
			}
		}
		if d, changed, ok := slidingCodec.takeWide(e, now, r, hits); ok {
			if changed && s.track {
				s.t.MarkChanged(key, e)
			}
			return d
		}
	}
}

var _ limit.Limiter = (*Sliding)(nil)
