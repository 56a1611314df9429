package bucket

import (
	"sync"

	"github.com/shardlimiter/shardlimiter/limit"
	"github.com/shardlimiter/shardlimiter/table"
)

// The table side of moving state (state.go has the format and the merge).
//
// Export reads a key under its mutex: the identity and the warm-up state
// change only under it, and the word it reads is one a take wrote.
//
// Import merges under the mutex with the rule-change fence of keyTable
// (keystate.go): it moves the word to pending, computes the merge from
// the word it fenced, writes the identity and warm-up state, then the
// merged word. A lock-free taker that loaded the word before the fence
// fails its CAS and retries; one that meets pending waits for the mutex.
// A merge that changes nothing puts the fenced word back. A retired entry
// (swept, evicted, deleted: Dead) is looked up again, so an import never
// lands on a removed entry.

// imageOf returns e's state, whose word w the caller fenced or read under
// e.Mu (held).
func imageOf(e *table.Entry[keyState], w int64, shaping bool) keyImage {
	id := e.State.id.Load()
	if id == 0 {
		return keyImage{shaping: shaping}
	}
	p := rateOf(id, e.State.period.Load(), shaping)
	s := keyImage{shaping: shaping, limit: p.limit, cap: p.capacity, period: p.period, tat: w}
	if id&warmMode != 0 && e.State.warm != nil {
		s.warm, s.stored, s.maxp = true, e.State.warm.stored, e.State.warm.maxp
	}
	return s
}

// Export returns key's encoded state at now (Unix ns), ok false when the
// key is absent or equal to a fresh key's state (full and, under a
// warm-up, fully cold): nothing worth moving. Safe for concurrent use with
// takes, imports and deletes; it holds the key's mutex for a few loads.
func (k *keyTable) Export(key string, now int64) (state []byte, ok bool) {
	now = clampNow(now)
	e := k.t.Peek(key)
	if e == nil {
		return nil, false
	}
	return k.exportEntry(e, now)
}

// exportEntry is Export of the key whose entry is e.
func (k *keyTable) exportEntry(e *table.Entry[keyState], now int64) (state []byte, ok bool) {
	s, ok := k.imageAt(e, now)
	if !ok {
		return nil, false
	}
	return encodeImage(s), true
}

// imageAt reads e's state, ok false when e is retired or its state is
// fresh at now (nothing worth moving).
func (k *keyTable) imageAt(e *table.Entry[keyState], now int64) (keyImage, bool) {
	e.Mu.Lock()
	w := e.Word.Load()
	s := imageOf(e, w, k.shaping)
	e.Mu.Unlock()
	return s, w != table.Dead && !s.freshAt(now)
}

// exportSlab is the size of the buffers ExportChanged encodes states into.
const exportSlab = 16 << 10

// ExportChanged drains up to max keys marked changed, as Changed does, and
// calls fn with each one's state at now (Unix ns) as Export returns it,
// skipping those Export would not return; it returns how many keys it
// drained. It reads each state through the entry the change list holds,
// not through a second lookup of the key, and encodes the states into a
// few shared buffers rather than one allocation each: a state fn gets
// stays valid (it is never overwritten) but shares its array with others.
// Safe for concurrent use.
func (k *keyTable) ExportChanged(max int, now int64, fn func(key string, state []byte)) int {
	now = clampNow(now)
	var buf []byte
	return k.t.DrainChangedEntries(max, func(key string, e *table.Entry[keyState]) {
		s, ok := k.imageAt(e, now)
		if !ok {
			return
		}
		if cap(buf)-len(buf) < maxImageSize {
			buf = make([]byte, 0, exportSlab)
		}
		from := len(buf)
		buf = appendImage(buf, s)
		fn(key, buf[from:len(buf):len(buf)])
	})
}

// Import merges an exported state into key at now: inserted when the key
// is absent (which may evict a least recently used key to respect the
// cap), merged when present so that the key keeps whichever state has
// consumed more (state.go). Bytes that do not decode, or encode the other
// bucket algorithm, are an error and change nothing. A state that is fresh
// at now changes nothing. When the merge changed the key and the table
// tracks changes, the key is marked changed, so that a key moved here
// reaches this node's replica; a merge that changes nothing marks nothing,
// so two nodes exchanging a key settle. Safe for concurrent use.
func (k *keyTable) Import(key string, state []byte, now int64, mark bool) error {
	in, err := decodeImage(state, k.shaping)
	if err != nil {
		return err
	}
	now = clampNow(now)
	if in.freshAt(now) {
		return nil
	}
	for {
		e := k.t.Get(key, now)
		changed, ok := importLocked(e, in, now)
		if ok {
			if changed && mark {
				k.t.MarkChanged(key, e)
			}
			return nil
		}
	}
}

// ImportEach is Import of many key states at once: states[i].State into
// states[i].Key for each i, looking the keys up shard by shard
// (table.GetEach) rather than one at a time. It calls bad with the index
// and error of each state that does not decode (that key is left as it
// was). Safe for concurrent use.
func (k *keyTable) ImportEach(states []limit.KeyState, now int64, mark bool, bad func(i int, err error)) {
	now = clampNow(now)
	sc := importScratches.Get().(*importScratch)
	defer importScratches.Put(sc)
	sc.idx, sc.in = sc.idx[:0], sc.in[:0]
	for i := range states {
		in, err := decodeImage(states[i].State, k.shaping)
		if err != nil {
			bad(i, err)
			continue
		}
		if in.freshAt(now) {
			continue
		}
		sc.idx, sc.in = append(sc.idx, int32(i)), append(sc.in, in)
	}
	k.t.GetEach(len(sc.idx), func(j int) string { return states[sc.idx[j]].Key }, now, &sc.each,
		func(j int, e *table.Entry[keyState]) {
			key := states[sc.idx[j]].Key
			for {
				changed, ok := importLocked(e, sc.in[j], now)
				if ok {
					if changed && mark {
						k.t.MarkChanged(key, e)
					}
					return
				}
				e = k.t.Get(key, now)
			}
		})
}

// importScratch is ImportEach's buffers, pooled (importScratches).
type importScratch struct {
	idx  []int32
	in   []keyImage
	each table.EachScratch[keyState]
}

var importScratches = sync.Pool{New: func() any { return new(importScratch) }}

// importLocked merges in into e under its mutex and the pending fence. It
// reports whether e changed, and ok false when e was retired.
func importLocked(e *table.Entry[keyState], in keyImage, now int64) (changed, ok bool) {
	e.Mu.Lock()
	defer e.Mu.Unlock()
	w := e.Word.Load()
	for w == table.Dead || !e.Word.CompareAndSwap(w, pending) {
		if w == table.Dead {
			return false, false
		}
		w = e.Word.Load()
	}
	local := imageOf(e, w, in.shaping)
	m := mergeImages(local, in, now)
	if m == local {
		e.Word.Store(w)
		return false, true
	}
	// Nobody else writes a pending word (see adopt), so plain stores do.
	id := m.rate().id()
	if m.warm {
		id |= warmMode
		e.State.warm = &warmState{stored: m.stored, maxp: m.maxp}
	} else {
		e.State.warm = nil // a later warm-up starts fully cold, not from coldness m does not carry
	}
	e.State.period.Store(m.period)
	e.State.id.Store(id)
	e.Word.Store(m.tat)
	return true, true
}

// Delete removes key and reports whether it was held. A take that raced
// it starts over from a fresh key. Safe for concurrent use.
func (k *keyTable) Delete(key string) bool { return k.t.Delete(key) }

// Range calls fn with every key held until fn returns false, with no lock
// of the table held while fn runs. Safe for concurrent use.
func (k *keyTable) Range(fn func(key string) bool) { k.t.Range(fn) }

// Changed calls fn with up to max keys whose state a take (or an import)
// changed since they were last handed out, clearing their mark first, and
// returns how many. Only a table made with table.Config.TrackChanges marks
// keys. Safe for concurrent use with takes: a change made after a key was
// handed out marks it again (table.DrainChanged).
func (k *keyTable) Changed(max int, fn func(key string)) int { return k.t.DrainChanged(max, fn) }

// TrackChanges turns change tracking on or off (table.SetTrackChanges).
func (k *keyTable) TrackChanges(on bool) { k.t.SetTrackChanges(on) }
