package bucket

import (
	"math"

	"github.com/shardlimiter/shardlimiter/limit"
	"github.com/shardlimiter/shardlimiter/table"
)

// coldFactor is how many stable intervals the coldest hit costs.
const coldFactor = 3

// warmState is a warm-up key's stored permits (its coldness) and the size
// of the scale they were measured on, so that a rule change keeps the
// fraction.
type warmState struct {
	stored float64 // in [0, maxp]; maxp is fully cold
	maxp   float64
}

// warmRate is a rule with a warm-up period. All float64 quantities are in
// nanoseconds or permits (hits).
type warmRate struct {
	rate
	stable float64 // ns per hit at the stable rate: period/limit
	maxp   float64 // stored permits of a fully cold key
}

func newWarmRate(r limit.Rule) warmRate {
	p := tokenRate(r)
	stable := float64(p.period) / float64(p.limit)
	return warmRate{rate: p, stable: stable, maxp: float64(r.Warmup) / stable}
}

// The curve: spending the stored permit at level x costs interval(x) ns,
// stable up to threshold = maxp/2, then rising linearly to coldFactor ×
// stable at maxp. Its integral from threshold to maxp is the warm-up period
// and from 0 to threshold half of it, which fixes maxp = warmup/stable;
// refilling stored permits at one per stable interval then takes exactly
// the warm-up period from 0 to maxp.

// extra returns the integral, above the stable line, of spending k stored
// permits from level s down to s−k.
func (w warmRate) extra(s, k float64) float64 {
	th := w.maxp / 2
	hi := max(s-th, 0)
	lo := max(s-k-th, 0)
	slope := (coldFactor - 1) * w.stable / (w.maxp - th)
	return slope / 2 * (hi*hi - lo*lo)
}

// resync brings stored permits up to now: idle time beyond a full bucket
// (tat in the past) cools the key at one permit per stable interval.
// Moving tat up to now is then a no-op for the GCRA part.
func (w warmRate) resync(tat int64, stored float64, now int64) (int64, float64) {
	if tat >= now {
		return tat, stored
	}
	return now, min(w.maxp, stored+float64(now-tat)/w.stable)
}

// take is rate.take with a warm-up: admission is decided exactly as for a
// plain token bucket (so Remaining, ResetAt and RetryAfter keep their
// meaning), but admitted hits are charged their stable cost plus the warm-up
// integral of the stored permits they spend. The surcharge is paid by the
// calls that follow, as in Guava: a cold key admits at a third of the
// stable rate and speeds up as it warms. Rejected hits, counted or not,
// spend no stored permits: they never reached the protected service. It
// is pure. b's CountRejected and Overdraft apply as in rate.take.
func (w warmRate) take(tat int64, stored float64, now, hits int64, b limit.Behavior) (int64, float64, verdict) {
	if hits <= 0 {
		nt, v := w.rate.take(tat, now, 0, b)
		return nt, stored, v
	}
	rt, rs := w.resync(tat, stored, now)
	if w.fits(rt-now, hits) {
		spend := min(float64(hits), rs)
		nt := rt + w.cost(hits) + int64(math.Ceil(w.extra(rs, spend)))
		return nt, rs - spend, verdict{allowed: true, debt: nt - now}
	}
	if b&(limit.CountRejected|limit.Overdraft) == 0 {
		return tat, stored, w.rejected(rt-now, hits)
	}
	nt, v := w.rate.take(rt, now, hits, b)
	return nt, rs, v
}

// idleWarm reports whether a warm key with word tat has been
// indistinguishable from a fresh key (full and fully cold) since idleSlack
// before now. The entry's mutex must be held.
func idleWarm(tat int64, s *keyState, now int64) bool {
	return s.warm != nil && idleCold(tat, s.warm.stored, s.warm.maxp, rateOf(s.id.Load(), s.period.Load(), false), now)
}

// idleCold reports whether the warm-up state (tat, stored permits out of
// maxp, under p) has been full and fully cold since idleSlack before now.
func idleCold(tat int64, stored, maxp float64, p rate, now int64) bool {
	if !idleWord(tat, now) {
		return false
	}
	w := warmRate{rate: p, stable: float64(p.period) / float64(p.limit), maxp: maxp}
	_, stored = w.resync(tat, stored, now-idleSlack)
	return stored >= maxp
}

// takeWarm applies hits to key under a rule with a warm-up. Warm keys are
// always taken under the entry's mutex: their state is two words.
func (k *keyTable) takeWarm(key string, now int64, w warmRate, hits int64, b limit.Behavior) verdict {
	id := w.id() | warmMode
	for {
		e := k.t.Lookup(key, now, hits > 0)
		v, st := takeWarmLocked(e, id, w, now, hits, b)
		switch st {
		case wrote:
			if k.track {
				k.t.MarkChanged(key, e)
			}
			return v
		case done:
			return v
		}
	}
}

func takeWarmLocked(e *table.Entry[keyState], id int64, w warmRate, now, hits int64, b limit.Behavior) (verdict, outcome) {
	e.Mu.Lock()
	defer e.Mu.Unlock()
	same := e.State.id.Load() == id && e.State.period.Load() == w.period && e.State.warm != nil && e.State.warm.maxp == w.maxp
	if !adopt(e, id, w.rate, now) {
		return verdict{}, dead
	}
	adoptWarm(&e.State, w)
	ws := e.State.warm
	for {
		cur := e.Word.Load()
		if cur == table.Dead {
			return verdict{}, dead
		}
		tat, stored := cur, ws.stored
		if b.Has(limit.Reset) {
			tat, stored = 0, w.maxp
		}
		nt, ns, v := w.take(tat, stored, now, hits, b)
		// A CAS, not a store: a plain taker that raced an earlier rule
		// change could still write (see keyTable).
		if nt == cur || e.Word.CompareAndSwap(cur, nt) {
			st := done
			if nt != cur || ns != ws.stored || !same {
				st = wrote
			}
			ws.stored = ns
			return v, st
		}
	}
}

// adoptWarm sets up the stored permits of a key that has just adopted w.
// A key new to warm-up starts fully cold; one whose warm-up changed keeps
// its fraction of coldness. A key back from plain mode keeps the coldness
// it had when it left: plain takes spend no stored permits, so that errs
// on the cold side. The entry's mutex must be held.
func adoptWarm(s *keyState, w warmRate) {
	switch {
	case s.warm == nil:
		s.warm = &warmState{stored: w.maxp, maxp: w.maxp}
	case s.warm.maxp != w.maxp:
		s.warm.stored = s.warm.stored / s.warm.maxp * w.maxp
		s.warm.maxp = w.maxp
	}
}
