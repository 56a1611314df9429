package window

import (
	"github.com/shardlimiter/shardlimiter/limit"
	"github.com/shardlimiter/shardlimiter/table"
)

// The word-or-mutex protocol shared by Fixed and Sliding.
//
// A key's state is a cell. While the cell packs into 64 bits it lives in
// Entry.Word and takes are lock-free: load, decide, CAS. (Fixed.Take and
// Sliding.Take run this loop themselves rather than through
// table.UpdateWord, whose closure and result struct cost about 30 ns a
// take, half the whole decision, and which cannot hand a take over to the
// mutex.) A cell that does
// not pack (large counts, very short periods) lives in *Entry.State, and
// Entry.Word holds wideWord; takes then lock Entry.Mu. Both paths run the
// same pure decision, so the representation never changes an answer.
//
// Only the holder of Mu moves a key between the two forms:
//
//   - word → wide: it sets State, then CASes Word from the packed word it
//     decided on to wideWord. A lock-free taker that decided on the same
//     word loses its CAS, reloads, sees wideWord and queues on Mu; if the
//     lock-free taker wins, this CAS fails and the locked take starts over.
//   - wide → word: it stores the packed word. No lock-free taker writes a
//     word that is wideWord, and the table retires an entry (Dead) only
//     with Mu held or by a CAS from a value it judged idle, which wideWord
//     never is; so nothing races this store.
//
// Retirement: RetireWordIf for packed keys; for wide keys RetireLockedIf,
// which retires only while Word is still wideWord (Mu held, so it cannot
// change), never a packed word that a lock-free taker might be CASing.

// wideWord is the Word of an entry whose state is in *Entry.State. Its
// code (31) is no slot exponent's, so it is never a packed state.
const wideWord int64 = 31 << codeShift

// codec is one algorithm's view of a cell: its packing, decision,
// idleness and merge (state.go).
type codec struct {
	kind   limit.Algorithm
	pack   func(cell) (int64, bool)
	unpack func(int64) cell
	decide func(c cell, now int64, r limit.Rule, hits int64) (cell, limit.Decision)
	idle   func(c cell, now int64) bool // fresh since idleSlack before now (Sweep)
	fresh  func(c cell, now int64) bool // equivalent to a fresh key at now
	merge  func(a, b cell, now int64) cell
}

// takeWide runs a take under e's mutex and reports whether it changed the
// key's state. ok is false when the caller must start over: e was retired,
// or a lock-free taker changed the packed word since it was read.
func (k *codec) takeWide(e *table.Entry[*cell], now int64, r limit.Rule, hits int64) (d limit.Decision, changed, ok bool) {
	e.Mu.Lock()
	defer e.Mu.Unlock()
	w := e.Word.Load()
	if w == table.Dead {
		return limit.Decision{}, false, false
	}
	c := wideOrPacked(e, w, k.unpack)
	nc, d := k.decide(c, now, r, hits)
	if !k.store(e, w, nc) {
		return limit.Decision{}, false, false
	}
	return d, nc != c, true
}

// store replaces e's cell, whose word was w, by c, under e.Mu (held). A
// packed word may still be changed by lock-free takers, so it is replaced
// by CAS; store reports false when that CAS lost and the caller must start
// over from the new word.
func (k *codec) store(e *table.Entry[*cell], w int64, c cell) bool {
	nw, fits := k.pack(c)
	switch {
	case w == wideWord && fits:
		e.Word.Store(nw)
		e.State = nil
	case w == wideWord:
		*e.State = c
	case fits:
		return nw == w || e.Word.CompareAndSwap(w, nw)
	default:
		e.State = &c
		if !e.Word.CompareAndSwap(w, wideWord) {
			e.State = nil
			return false
		}
	}
	return true
}

// wideOrPacked returns the cell of e, whose word is w. e.Mu must be held.
func wideOrPacked(e *table.Entry[*cell], w int64, unpack func(int64) cell) cell {
	if w == wideWord {
		return *e.State
	}
	return unpack(w)
}

// retire is the table's RetireFunc: it retires e if its cell is idle.
func (k *codec) retire(e *table.Entry[*cell], now int64) bool {
	if e.RetireWordIf(func(w int64) bool { return w != wideWord && k.idle(k.unpack(w), now) }) {
		return true
	}
	if e.Word.Load() != wideWord {
		return false
	}
	return e.RetireLockedIf(func(s **cell) bool {
		return e.Word.Load() == wideWord && k.idle(**s, now)
	})
}

// hybridTable holds what Fixed and Sliding share beyond the codec: the
// table and its bookkeeping methods. Their Take loops stay separate on
// purpose: calling pack/unpack/decide directly lets the compiler inline
// them, which the codec's function fields would not (measured: 58 vs 95 ns
// per take).
type hybridTable struct {
	t *table.Table[*cell]
	// track is table.Config.TrackChanges, checked here so that a take
	// with tracking off makes no call (the table's generic methods are
	// not inlined).
	track bool
}

// Sweep retires up to about budget keys that have been equivalent to a
// fresh key (window ended, estimate 0) for at least a second at now, and
// returns how many it removed.
func (h hybridTable) Sweep(now int64, budget int) int { return h.t.Sweep(clampTime(now), budget) }

// Len returns how many keys are held.
func (h hybridTable) Len() int { return h.t.Len() }

// Warm brings into the caches the entries that takes of keys will look up
// (table.Table.Warm): call it with the keys of the next few checks of a
// batch.
func (h hybridTable) Warm(keys []string) { h.t.Warm(keys) }

// Evicted returns how many keys were evicted to respect the key cap.
func (h hybridTable) Evicted() uint64 { return h.t.Evicted() }

// Bytes returns the bytes charged for the keys held.
func (h hybridTable) Bytes() int64 { return h.t.Bytes() }

// EvictedForBytes returns how many keys were evicted to respect the byte
// budget.
func (h hybridTable) EvictedForBytes() uint64 { return h.t.EvictedForBytes() }
