package table

import "strings"

// Change tracking (Config.TrackChanges), for replication.
//
// A take that changed a key's state calls MarkChanged; a replicator calls
// DrainChanged now and then and sends the state of each key it is handed.
//
// The mark is the lowest bit of the entry's used word, so it costs no
// memory per key. A key is appended to its shard's change list only when
// its mark flips from clear to set, under the shard's chMu (a small lock
// of its own, never held with the map lock): a key taken a million times
// between two drains is queued once, and every take after the first costs
// one atomic load. With tracking off, MarkChanged is one branch. The
// flip also calls Config.OnChange, after chMu is released: a replicator
// that found nothing to send sleeps until then instead of polling.
//
// # The race between a take that marks and a drain that clears
//
// A take writes the key's state, then marks. A drain takes the key off its
// list, clears its mark, and only then calls fn, which reads the state
// (Export). No change is lost:
//
//   - a take whose mark load comes after the clear finds the mark clear,
//     sets it and queues the key again: the next drain hands it out;
//   - a take whose mark load comes before the clear found the mark set and
//     queued nothing; but its state write came before that load, so before
//     the clear, so before fn reads the state (atomics and mutexes are
//     sequentially consistent in Go): fn sends the change.
//
// A key is queued at most once per mark, so the lists hold each live key
// at most once, plus retired entries (evicted, swept, deleted) not yet
// drained. The drain skips those; so that a flood of new keys between two
// drains cannot grow a list without bound, a list that reaches changeCap
// (twice the shard's key cap) is cleared of retired entries before it
// grows, under chMu, which keeps it under twice the cap.

// markBit is the changed mark in Entry.used.
const markBit = 1

// change is a queued key: the table's own copy of the key, and its entry.
type change[S any] struct {
	key string
	e   *Entry[S]
}

// MarkChanged records that a take changed the state of e, the entry of
// key, so that DrainChanged hands key out. It does nothing unless the table
// tracks changes. Safe for concurrent use; call it after the change is
// written.
func (t *Table[S]) MarkChanged(key string, e *Entry[S]) {
	if t.track.Load() && e.used.Load()&markBit == 0 {
		t.mark(key, e)
	}
}

// mark sets e's mark and queues key if the mark was clear.
func (t *Table[S]) mark(key string, e *Entry[S]) {
	for u := e.used.Load(); u&markBit == 0; u = e.used.Load() {
		if e.used.CompareAndSwap(u, u|markBit) {
			c := change[S]{key: strings.Clone(key), e: e} // the caller's key may be a reused buffer
			sh := t.shardOf(t.hash(key))
			sh.chMu.Lock()
			if len(sh.changes) >= t.changeCap {
				sh.compactChangesLocked()
			}
			sh.changes = append(sh.changes, c)
			sh.chMu.Unlock()
			if t.onChange != nil {
				t.onChange()
			}
			return
		}
	}
}

// compactChangesLocked drops the retired entries of the change list.
// sh.chMu must be held.
func (sh *shard[S]) compactChangesLocked() {
	live := sh.changes[:0]
	for _, c := range sh.changes {
		if !c.e.Dead() {
			live = append(live, c)
		}
	}
	clear(sh.changes[len(live):])
	sh.changes = live
}

// DrainChanged calls fn with up to max keys marked changed, clearing each
// key's mark before fn sees it, and returns how many it handed out. Keys
// whose entry was retired since they were marked are dropped without a
// call. Shards are visited round-robin from where the previous drain
// stopped, so a small max does not starve any shard. fn runs with no lock
// held and may use the table. Safe for concurrent use; with tracking off it
// returns 0.
func (t *Table[S]) DrainChanged(max int, fn func(key string)) int {
	return t.DrainChangedEntries(max, func(key string, _ *Entry[S]) { fn(key) })
}

// DrainChangedEntries is DrainChanged handing out each key's entry too, so
// that fn can read its state without looking the key up again. The entry
// may be retired while fn runs: fn checks Dead as a take does.
func (t *Table[S]) DrainChangedEntries(max int, fn func(key string, e *Entry[S])) int {
	if !t.track.Load() {
		return 0
	}
	n := 0
	var batch []change[S]
	start := t.drainNext.Load()
	for i := uint64(0); i < uint64(len(t.shards)) && n < max; i++ {
		idx := (start + i) & t.mask
		sh := &t.shards[idx]
		sh.chMu.Lock()
		k := min(len(sh.changes), max-n)
		batch = append(batch[:0], sh.changes[:k]...)
		rest := copy(sh.changes, sh.changes[k:])
		clear(sh.changes[rest:])
		sh.changes = sh.changes[:rest]
		if rest == 0 && cap(sh.changes) > t.changeCap {
			sh.changes = nil // a burst is over: give its memory back
		}
		sh.chMu.Unlock()
		for _, c := range batch {
			c.e.clearMark()
			if !c.e.Dead() {
				fn(c.key, c.e)
				n++
			}
		}
		next := idx + 1
		if rest > 0 {
			next = idx // resume in this shard
		}
		t.drainNext.Store(next)
	}
	clear(batch)
	return n
}

// clearMark clears e's changed mark.
func (e *Entry[S]) clearMark() {
	for u := e.used.Load(); u&markBit != 0; u = e.used.Load() {
		if e.used.CompareAndSwap(u, u&^markBit) {
			return
		}
	}
}

// SetTrackChanges turns change tracking on or off (Config.TrackChanges
// sets it at first). Turning it off drops the keys queued so far, clearing
// their marks, so that a key changed after it is turned on again is queued
// again; changes made while it was off are not handed out. A node turns it
// off while it is alone: there is nobody to replicate to, and a mark costs
// a take a little.
func (t *Table[S]) SetTrackChanges(on bool) {
	if t.track.Swap(on) == on || on {
		return
	}
	for i := range t.shards {
		sh := &t.shards[i]
		sh.chMu.Lock()
		queued := sh.changes
		sh.changes = nil
		sh.chMu.Unlock()
		for _, c := range queued {
			for u := c.e.used.Load(); u&markBit != 0 && !c.e.used.CompareAndSwap(u, u&^markBit); u = c.e.used.Load() {
			}
		}
	}
}
