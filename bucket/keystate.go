package bucket

import (
	"sync/atomic"

	"github.com/shardlimiter/shardlimiter/limit"
	"github.com/shardlimiter/shardlimiter/table"
)

// keyState is what an entry holds beside its Word (the theoretical arrival
// time): the identity of the rule the word was computed under, and the
// warm-up state of keys that run with one.
//
// The identity is two atomics so that lock-free takers can check it; it is
// written only with the entry's mutex held and, unless the key is fresh,
// the word set to pending (see keyTable). warm is guarded by the mutex.
type keyState struct {
	id     atomic.Int64 // ruleID; 0 for a fresh key
	period atomic.Int64 // the rule's Period, ns
	warm   *warmState   // nil until the key first runs with a warm-up
}

// pending is the word of an entry whose rule is being changed. Only the
// holder of the entry's mutex sets it and replaces it.
const pending = table.Dead + 1

// A rule's identity packs limit, capacity and the warm-up mode into one
// word: limit and capacity are ≤ limit.MaxLimit+1 < 2^31.
const (
	idBits   = 31
	idMask   = 1<<idBits - 1
	warmMode = int64(1) << 62
)

func (p rate) id() int64 { return p.limit<<idBits | p.capacity }

// rateOf decodes an identity written by id.
func rateOf(id, period int64, shaping bool) rate {
	return rate{limit: id >> idBits & idMask, period: period, capacity: id & idMask, shaping: shaping}
}

// keyTable is a table of GCRA words with their rule identity.
//
// # Protocol
//
// A take for a key whose identity matches its rule is lock-free: load the
// word, then the identity, compute, CAS the word. A take whose rule differs
// (or a fresh key, or any warm-up take) locks the entry's mutex and adopts
// its rule: it CASes the word to pending, rescales it (rescale), writes the
// new identity, then stores the rescaled word.
//
// The race this prevents: a lock-free taker that loaded the old word and
// the old identity could otherwise CAS a result computed under the old rule
// over a word already rescaled to the new one, charging its hits at the old
// rate against state that means something else. Because the word is loaded
// before the identity, a taker that saw the old identity loaded a word from
// before the change, and its CAS fails once the word moved to pending and
// on. A taker that meets pending waits for the mutex. The exposure left is
// a CAS that lands on a word equal to the one it loaded although the rule
// changed in between: rescaling left the debt as it was (a full bucket,
// or the same capacity in time), or the word came back to that value. That
// applies one call's hits, decided under the rule its caller sent, at that
// rule's cost; nothing accumulates.
//
// Retirement follows the table's protocol: RetireWordIf for keys in plain
// mode (idle(pending) is false, so a rule change is never retired midway),
// RetireLockedIf for warm keys, whose idleness needs the mutex.
type keyTable struct {
	t       *table.Table[keyState]
	shaping bool // LEAKY_BUCKET: rescale keeps queued hits; Import takes its states only
	// track is table.Config.TrackChanges, checked here so that a take
	// with tracking off makes no call (the table's generic methods are
	// not inlined).
	track bool
}

func newKeyTable(cfg table.Config, shaping bool) keyTable {
	return keyTable{t: table.New(cfg, retireKey), shaping: shaping, track: cfg.TrackChanges}
}

func (k *keyTable) Sweep(now int64, budget int) int { return k.t.Sweep(now, budget) }

// Warm brings into the caches the state that takes of keys will read
// (table.Table.Warm): call it with the keys of the next few checks of a
// batch.
func (k *keyTable) Warm(keys []string) { k.t.Warm(keys) }

// Len returns how many keys are held.
func (k *keyTable) Len() int { return k.t.Len() }

// Evicted returns how many keys were evicted to respect the key cap.
func (k *keyTable) Evicted() uint64 { return k.t.Evicted() }

// Bytes returns the bytes charged for the keys held.
func (k *keyTable) Bytes() int64 { return k.t.Bytes() }

// EvictedForBytes returns how many keys were evicted to respect the byte
// budget.
func (k *keyTable) EvictedForBytes() uint64 { return k.t.EvictedForBytes() }

// take applies hits to key under p, lock-free when the key's rule is p.
func (k *keyTable) take(key string, now int64, p rate, hits int64, b limit.Behavior) verdict {
	id := p.id()
	for {
		e := k.t.Lookup(key, now, hits > 0)
		v, st := takeWord(e, id, p, now, hits, b)
		if st == mismatch {
			v, st = takeAdopting(e, id, p, now, hits, b)
		}
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

type outcome uint8

const (
	done     outcome = iota // decided; the key's state is unchanged
	wrote                   // decided, and the key's state changed
	dead                    // the entry was retired: look the key up again
	mismatch                // the key's rule is not p, or a rule change is under way
)

// takeWord is the lock-free CAS loop for a key whose identity is id.
func takeWord(e *table.Entry[keyState], id int64, p rate, now, hits int64, b limit.Behavior) (verdict, outcome) {
	for {
		w := e.Word.Load()
		switch {
		case w == table.Dead:
			return verdict{}, dead
		case w == pending || e.State.id.Load() != id || e.State.period.Load() != p.period:
			return verdict{}, mismatch
		}
		tat := w
		if b.Has(limit.Reset) {
			tat = 0
		}
		nw, v := p.take(tat, now, hits, b)
		if nw == w {
			// Nothing to write; the answer holds if the word did not move
			// while the identity was read.
			if e.Word.Load() == w {
				return v, done
			}
			continue
		}
		if e.Word.CompareAndSwap(w, nw) {
			return v, wrote
		}
	}
}

// takeAdopting takes under the entry's mutex after making p the key's
// rule. It reports dead if the entry was retired.
func takeAdopting(e *table.Entry[keyState], id int64, p rate, now, hits int64, b limit.Behavior) (verdict, outcome) {
	e.Mu.Lock()
	defer e.Mu.Unlock()
	same := e.State.id.Load() == id && e.State.period.Load() == p.period
	if !adopt(e, id, p, now) {
		return verdict{}, dead
	}
	v, st := takeWord(e, id, p, now, hits, b)
	if st == done && !same {
		st = wrote // the rule change rescaled the key
	}
	return v, st
}

// adopt makes (id, p) the entry's rule, rescaling its word if it was
// computed under another rule. It reports false if the entry was retired.
// e.Mu must be held.
func adopt(e *table.Entry[keyState], id int64, p rate, now int64) bool {
	old := e.State.id.Load()
	oldPeriod := e.State.period.Load()
	if old == id && oldPeriod == p.period {
		return e.Word.Load() != table.Dead
	}
	if old == 0 {
		// A fresh word (0) means a full bucket under any rule; no taker can
		// have matched identity 0, so there is nothing to fence off. The
		// period goes first: takers read the identity before the period.
		e.State.period.Store(p.period)
		e.State.id.Store(id)
		return e.Word.Load() != table.Dead
	}
	w := e.Word.Load()
	for w == table.Dead || !e.Word.CompareAndSwap(w, pending) {
		if w == table.Dead {
			return false
		}
		w = e.Word.Load()
	}
	e.State.period.Store(p.period)
	e.State.id.Store(id)
	// Nobody else writes a pending word: takers wait for the mutex, the
	// sweep never finds pending idle, and eviction needs the mutex.
	e.Word.Store(rescale(w, now, rateOf(old, oldPeriod, p.shaping), p))
	return true
}

// retireKey is the table's RetireFunc.
func retireKey(e *table.Entry[keyState], now int64) bool {
	if e.State.id.Load()&warmMode != 0 {
		return e.RetireLockedIf(func(s *keyState) bool {
			return s.id.Load()&warmMode != 0 && idleWarm(e.Word.Load(), s, now)
		})
	}
	// The identity is read after the word, so a switch to warm-up before
	// the identity load is seen. One after it either moved the word (the
	// retiring CAS fails) or left it full and idle: retiring the key then
	// only forgets coldness, and a fresh key is fully cold.
	return e.RetireWordIf(func(w int64) bool {
		return e.State.id.Load()&warmMode == 0 && idleWord(w, now)
	})
}
