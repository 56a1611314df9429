package window

import (
	"math/bits"
	"sync"
	"time"

	"github.com/shardlimiter/shardlimiter/limit"
)

// The reference tables: one map behind one mutex, plain unpacked state,
// decisions written out directly. The optimized tables must answer exactly
// as they do (equivalence_test.go), and are measured against them
// (bench_test.go).

// refWindow is a FIXED_WINDOW or SLIDING_WINDOW key: counts of the window
// ending at end (and the one before it) under period.
type refWindow struct {
	period, end int64
	prev, cur   int64
	cal         limit.Calendar // FIXED_WINDOW with a calendar (calendar_test.go)
}

// refLocate places s relative to the window of period p containing now:
// it returns the end of the window the take counts in, the instant it
// counts at, and the counts it sees there.
func refLocate(s refWindow, now, p int64) (end, at, prev, cur int64) {
	end = now - now%p + p
	if s.prev == 0 && s.cur == 0 {
		return end, now, 0, 0
	}
	se := s.end
	if s.period != p {
		// The documented mapping of a period change: a new octave
		// restarts; otherwise the counts belong to the first window of
		// the new period ending at or after the start of the old end's
		// slot.
		g := refSlotExp(p)
		if refSlotExp(s.period) != g {
			return end, now, 0, 0
		}
		lo := s.end >> g << g
		se = (lo + p - 1) / p * p
	}
	switch {
	case se == end:
		return end, now, s.prev, s.cur
	case se == end-p:
		return end, now, s.cur, 0
	case se > end: // clock went backwards: count at the stored window's start
		return se, se - p, s.prev, s.cur
	}
	return end, now, 0, 0
}

func refSlotExp(p int64) int64 {
	g := int64(63 - bits.LeadingZeros64(uint64(p)))
	return min(g, 49)
}

type refWindows struct {
	mu      sync.Mutex
	m       map[string]*refWindow
	sliding bool
	changed map[string]bool // keys changed since Changed last handed them out
}

func newRefFixed() *refWindows {
	return &refWindows{m: map[string]*refWindow{}, changed: map[string]bool{}}
}

func newRefSliding() *refWindows {
	return &refWindows{m: map[string]*refWindow{}, sliding: true, changed: map[string]bool{}}
}

func (t *refWindows) Take(key string, now int64, r limit.Rule, hits int64) limit.Decision {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.m[key]
	if s == nil {
		s = &refWindow{}
		t.m[key] = s
	}
	before := *s
	defer func() {
		if *s != before {
			t.changed[key] = true
		}
	}()
	if r.Behavior.Has(limit.Reset) {
		*s = refWindow{}
	}
	now = min(max(now, 0), MaxTime)
	hits = max(hits, 0)
	if t.sliding {
		return refSlidingTake(s, now, r, hits)
	}
	return refFixedTake(s, now, r, hits)
}

func refFixedTake(s *refWindow, now int64, r limit.Rule, hits int64) limit.Decision {
	p, lim := int64(r.Period), r.Limit
	end, _, _, count := refLocate(*s, now, p)
	if r.Calendar != limit.NoCalendar || s.cal != limit.NoCalendar {
		end, count = refCalendarLocate(*s, now, p, r.Calendar)
	}
	before := count
	over := r.Behavior.Has(limit.Overdraft)
	ask := max(hits, 1)
	if over {
		ask = hits
	}
	d := limit.Decision{ResetAt: end}
	if count+ask <= lim {
		d.Allowed = true
		count += hits
	} else {
		d.RetryAfter = time.Duration(end - now)
		if ask > lim {
			d.RetryAfter = limit.Never
		}
		switch {
		case hits > 0 && over:
			count = min(count+hits, lim+limit.MaxHits)
		case hits > 0 && r.Behavior.Has(limit.CountRejected) && count < lim:
			count = min(count+hits, lim)
		}
	}
	if count != before {
		*s = refWindow{period: p, end: end, cur: count, cal: r.Calendar}
	}
	d.Remaining = max(lim-count, 0)
	return d
}

func refSlidingTake(s *refWindow, now int64, r limit.Rule, hits int64) limit.Decision {
	p, lim := int64(r.Period), r.Limit
	end, at, prev, cur := refLocate(*s, now, p)
	rem := end - at
	over := r.Behavior.Has(limit.Overdraft)
	ask := max(hits, 1)
	if over {
		ask = hits
	}
	// Admit when prev×rem/p + cur + ask ≤ lim, i.e. prev×rem ≤ (lim−cur−ask)×p.
	fits := func(cur, ask int64) bool {
		return lim-cur-ask >= 0 && le128(prev, rem, lim-cur-ask, p)
	}
	d := limit.Decision{}
	before := cur
	if fits(cur, ask) {
		d.Allowed = true
		cur += hits
	} else if hits > 0 && over {
		cur = min(cur+hits, lim+limit.MaxHits)
	} else if hits > 0 && r.Behavior.Has(limit.CountRejected) && cur < lim {
		cur = min(cur+hits, lim)
	}
	// weighted = ⌈prev×rem/p⌉: the smallest w with prev×rem ≤ w×p.
	hi, lo := bits.Mul64(uint64(prev), uint64(rem))
	q, rr := bits.Div64(hi, lo, uint64(p))
	weighted := int64(q)
	if rr > 0 {
		weighted++
	}
	d.Remaining = max(lim-weighted-cur, 0)
	switch {
	case cur > 0:
		d.ResetAt = end + p
	case prev > 0:
		d.ResetAt = end
	default:
		d.ResetAt = now
	}
	if !d.Allowed {
		d.RetryAfter = limit.Never
		if ask <= lim {
			d.RetryAfter = time.Duration(refSlidingRetry(end, p, prev, cur, lim-ask) - now)
		}
	}
	if cur != before {
		*s = refWindow{period: p, end: end, prev: prev, cur: cur}
	}
	return d
}

// refSlidingRetry solves estimate(t) ≤ need for the first integer t: in the
// current window prev×(end−t) ≤ (need−cur)×p, else in the next
// cur×(end+p−t) ≤ need×p.
func refSlidingRetry(end, p, prev, cur, need int64) int64 {
	if cur <= need {
		hi, lo := bits.Mul64(uint64(need-cur), uint64(p))
		q, _ := bits.Div64(hi, lo, uint64(prev))
		return end - int64(q)
	}
	hi, lo := bits.Mul64(uint64(need), uint64(p))
	q, _ := bits.Div64(hi, lo, uint64(cur))
	return end + p - int64(q)
}

// le128 reports a×b ≤ c×d for non-negative operands.
func le128(a, b, c, d int64) bool {
	h1, l1 := bits.Mul64(uint64(a), uint64(b))
	h2, l2 := bits.Mul64(uint64(c), uint64(d))
	return h1 < h2 || h1 == h2 && l1 <= l2
}

// Sweep removes keys whose state no take at or after now−1s can see.
func (t *refWindows) Sweep(now int64, _ int) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := 0
	for k, s := range t.m {
		// Under any period of the octave the counts map to a window
		// ending before end + 2^(g+1).
		g := refSlotExp(s.period)
		horizon := s.end + 1<<(g+1)
		if g >= 49 {
			horizon = s.end + int64(limit.MaxPeriod)
		}
		if t.sliding {
			horizon += horizon - s.end
		}
		if s.cur == 0 && s.prev == 0 || horizon <= now-idleSlack {
			delete(t.m, k)
			delete(t.changed, k)
			n++
		}
	}
	return n
}

func (t *refWindows) Len() int        { t.mu.Lock(); defer t.mu.Unlock(); return len(t.m) }
func (t *refWindows) Evicted() uint64 { return 0 }

// refLogKey is a SLIDING_LOG key: the sorted timestamps of counted hits.
type refLogKey struct {
	times  []int64
	last   int64
	idleAt int64 // 0: fresh
}

type refLog struct {
	mu      sync.Mutex
	m       map[string]*refLogKey
	changed map[string]bool // keys changed since Changed last handed them out
}

func newRefLog() *refLog { return &refLog{m: map[string]*refLogKey{}, changed: map[string]bool{}} }

func (t *refLog) Take(key string, now int64, r limit.Rule, hits int64) limit.Decision {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.m[key]
	if s == nil {
		s = &refLogKey{}
		t.m[key] = s
	}
	now = min(max(now, 0), MaxTime)
	hits = max(hits, 0)
	if r.Behavior.Has(limit.Reset) || s.idleAt != 0 && now >= s.idleAt {
		if s.idleAt != 0 {
			t.changed[key] = true
		}
		*s = refLogKey{}
	}
	at := now
	if s.idleAt != 0 && s.last > at {
		at = s.last
	}
	p, lim, mi := int64(r.Period), r.Limit, int64(r.MinInterval)
	// The counted hits are the suffix of times after at−p.
	k := len(s.times)
	for k > 0 && at-s.times[k-1] < p {
		k--
	}
	counted := s.times[k:]
	over := r.Behavior.Has(limit.Overdraft)
	ask, bound := max(hits, 1), lim
	if over {
		ask, bound = hits, lim+1
	}
	n := int64(len(counted))
	d := limit.Decision{Allowed: n+ask <= lim && (s.idleAt == 0 || at-s.last >= mi)}
	if hits > 0 && (d.Allowed || over || r.Behavior.Has(limit.CountRejected)) {
		keep := max(bound, n)
		times := append(s.times[:0], counted...)
		for range min(hits, bound) {
			times = append(times, at)
		}
		if int64(len(times)) > keep {
			times = append(times[:0], times[int64(len(times))-keep:]...)
		}
		s.times, counted = times, times
		s.last, s.idleAt = at, at+max(p, mi)
		t.changed[key] = true
	}
	n = int64(len(counted))
	d.Remaining = max(lim-n, 0)
	d.ResetAt = now
	if n > 0 {
		d.ResetAt = min(counted[n-1]+p, s.idleAt)
	}
	if !d.Allowed {
		d.RetryAfter = limit.Never
		if ask <= lim {
			t := at
			if n+ask > lim {
				t = max(t, counted[n+ask-lim-1]+p)
			}
			if s.idleAt != 0 {
				t = min(max(t, s.last+mi), s.idleAt)
			}
			d.RetryAfter = time.Duration(t - now)
		}
	}
	return d
}

func (t *refLog) Sweep(now int64, _ int) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := 0
	for k, s := range t.m {
		if s.idleAt <= now-idleSlack {
			delete(t.m, k)
			delete(t.changed, k)
			n++
		}
	}
	return n
}

func (t *refLog) Len() int        { t.mu.Lock(); defer t.mu.Unlock(); return len(t.m) }
func (t *refLog) Evicted() uint64 { return 0 }
