package window

import (
	"github.com/shardlimiter/shardlimiter/limit"
	"github.com/shardlimiter/shardlimiter/table"
)

// The table side of moving state (state.go and logstate.go have the
// formats and the merges).
//
// Fixed and Sliding read and merge a cell under the entry's mutex, which
// keeps it from moving between the packed word and the mutex form (see
// hybrid.go). A packed word may still change under a lock-free taker
// meanwhile: Export reads one word, a state some take left, and Import
// writes a packed result by CAS from the word it merged with, starting
// over when a taker got there first. The log is all under the mutex. A
// retired entry (swept, evicted, deleted: Dead) is looked up again, so an
// import never lands on a removed entry.

// exportCell returns key's encoded cell, ok false when absent or fresh at
// now.
func (k *codec) exportCell(t *table.Table[*cell], key string, now int64) ([]byte, bool) {
	now = clampTime(now)
	e := t.Peek(key)
	if e == nil {
		return nil, false
	}
	return k.exportEntry(e, now)
}

// exportEntry is exportCell of the key whose entry is e.
func (k *codec) exportEntry(e *table.Entry[*cell], now int64) ([]byte, bool) {
	e.Mu.Lock()
	w := e.Word.Load()
	var c cell
	if w != table.Dead {
		c = wideOrPacked(e, w, k.unpack)
	}
	e.Mu.Unlock()
	if w == table.Dead || k.fresh(c, now) {
		return nil, false
	}
	return encodeCell(k.kind, c), true
}

// exportChanged drains t's changed keys and exports each (see
// Fixed.ExportChanged).
func (k *codec) exportChanged(t *table.Table[*cell], max int, now int64, fn func(key string, state []byte)) int {
	now = clampTime(now)
	return t.DrainChangedEntries(max, func(key string, e *table.Entry[*cell]) {
		if st, ok := k.exportEntry(e, now); ok {
			fn(key, st)
		}
	})
}

// importCell merges an encoded cell into key (see Limiter.Import).
func (k *codec) importCell(t *table.Table[*cell], key string, state []byte, now int64, mark bool) error {
	in, err := decodeCell(state, k.kind)
	if err != nil {
		return err
	}
	now = clampTime(now)
	if k.fresh(in, now) {
		return nil
	}
	for {
		e := t.Get(key, now)
		changed, ok := k.mergeLocked(e, in, now)
		if ok {
			if changed && mark {
				t.MarkChanged(key, e)
			}
			return nil
		}
	}
}

// importEach is importCell of many key states, their keys looked up
// shard by shard (table.GetEach); bad gets each state that does not
// decode.
func (k *codec) importEach(t *table.Table[*cell], states []limit.KeyState, now int64, mark bool, bad func(i int, err error)) {
	now = clampTime(now)
	idx, in := make([]int32, 0, len(states)), make([]cell, 0, len(states))
	for i := range states {
		c, err := decodeCell(states[i].State, k.kind)
		if err != nil {
			bad(i, err)
			continue
		}
		if !k.fresh(c, now) {
			idx, in = append(idx, int32(i)), append(in, c)
		}
	}
	t.GetEach(len(idx), func(j int) string { return states[idx[j]].Key }, now, nil, func(j int, e *table.Entry[*cell]) {
		key := states[idx[j]].Key
		for {
			changed, ok := k.mergeLocked(e, in[j], now)
			if ok {
				if changed && mark {
					t.MarkChanged(key, e)
				}
				return
			}
			e = t.Get(key, now)
		}
	})
}

// mergeLocked merges in into e's cell under its mutex and reports whether
// the cell changed; ok is false when the caller must start over (e was
// retired, or a lock-free taker moved the word meanwhile).
func (k *codec) mergeLocked(e *table.Entry[*cell], in cell, now int64) (changed, ok bool) {
	e.Mu.Lock()
	defer e.Mu.Unlock()
	w := e.Word.Load()
	if w == table.Dead {
		return false, false
	}
	c := wideOrPacked(e, w, k.unpack)
	m := k.merge(c, in, now)
	if m == c {
		return false, true
	}
	return true, k.store(e, w, m)
}

// Export returns key's encoded state at now (Unix ns), ok false when the
// key is absent or equivalent to a fresh key (its window is over). Safe
// for concurrent use.
func (f *Fixed) Export(key string, now int64) (state []byte, ok bool) {
	return fixedCodec.exportCell(f.t, key, now)
}

// ExportChanged drains up to max keys marked changed, as Changed does, and
// calls fn with each one's state at now as Export returns it, skipping
// those Export would not return; it returns how many keys it drained. It
// reads each state through the entry the change list holds, not through a
// second lookup of the key. Safe for concurrent use.
func (f *Fixed) ExportChanged(max int, now int64, fn func(key string, state []byte)) int {
	return fixedCodec.exportChanged(f.t, max, now, fn)
}

// Import merges an exported FIXED_WINDOW state into key at now, keeping
// whichever state has consumed more (state.go); see limit.StateMover.
// Safe for concurrent use.
func (f *Fixed) Import(key string, state []byte, now int64, mark bool) error {
	return fixedCodec.importCell(f.t, key, state, now, mark)
}

// ImportEach is Import of many FIXED_WINDOW states at once, their keys
// looked up shard by shard; bad gets the index and error of each state
// that does not decode. Safe for concurrent use.
func (f *Fixed) ImportEach(states []limit.KeyState, now int64, mark bool, bad func(i int, err error)) {
	fixedCodec.importEach(f.t, states, now, mark, bad)
}

// Export returns key's encoded state at now (Unix ns), ok false when the
// key is absent or equivalent to a fresh key (its estimate is 0 for good).
// Safe for concurrent use.
func (s *Sliding) Export(key string, now int64) (state []byte, ok bool) {
	return slidingCodec.exportCell(s.t, key, now)
}

// ExportChanged is Fixed.ExportChanged for SLIDING_WINDOW keys.
func (s *Sliding) ExportChanged(max int, now int64, fn func(key string, state []byte)) int {
	return slidingCodec.exportChanged(s.t, max, now, fn)
}

// Import merges an exported SLIDING_WINDOW state into key at now, keeping
// whichever state has consumed more (state.go); see limit.StateMover.
// Safe for concurrent use.
func (s *Sliding) Import(key string, state []byte, now int64, mark bool) error {
	return slidingCodec.importCell(s.t, key, state, now, mark)
}

// ImportEach is Fixed.ImportEach for SLIDING_WINDOW states.
func (s *Sliding) ImportEach(states []limit.KeyState, now int64, mark bool, bad func(i int, err error)) {
	slidingCodec.importEach(s.t, states, now, mark, bad)
}

// Delete removes key and reports whether it was held. A take that raced
// it starts over from a fresh key. Safe for concurrent use.
func (h hybridTable) Delete(key string) bool { return h.t.Delete(key) }

// Range calls fn with every key held until fn returns false, with no lock
// of the table held while fn runs. Safe for concurrent use.
func (h hybridTable) Range(fn func(key string) bool) { h.t.Range(fn) }

// Changed calls fn with up to max keys whose state a take (or an import)
// changed since they were last handed out, clearing their mark first, and
// returns how many; see limit.StateMover. Only a table made with
// table.Config.TrackChanges marks keys. Safe for concurrent use.
func (h hybridTable) Changed(max int, fn func(key string)) int { return h.t.DrainChanged(max, fn) }

// TrackChanges turns change tracking on or off (table.SetTrackChanges).
func (h hybridTable) TrackChanges(on bool) { h.t.SetTrackChanges(on) }

// Export returns key's encoded log at now (Unix ns), ok false when the key
// is absent or equivalent to a fresh key. It holds the key's mutex while
// it copies the runs out (at most limit.MaxLogEntries), and encodes them
// after. Safe for concurrent use.
func (l *Log) Export(key string, now int64) (state []byte, ok bool) {
	now = clampTime(now)
	e := l.t.Peek(key)
	if e == nil {
		return nil, false
	}
	return exportLogEntry(e, now)
}

// exportLogEntry is Export of the key whose entry is e.
func exportLogEntry(e *table.Entry[logState], now int64) (state []byte, ok bool) {
	e.Mu.Lock()
	var im logImage
	if !e.Dead() {
		im = imageOfLog(&e.State)
	}
	e.Mu.Unlock()
	if im.freshAt(now) {
		return nil, false
	}
	return encodeLog(im), true
}

// ExportChanged is Fixed.ExportChanged for SLIDING_LOG keys.
func (l *Log) ExportChanged(max int, now int64, fn func(key string, state []byte)) int {
	now = clampTime(now)
	return l.t.DrainChangedEntries(max, func(key string, e *table.Entry[logState]) {
		if st, ok := exportLogEntry(e, now); ok {
			fn(key, st)
		}
	})
}

// Import merges an exported SLIDING_LOG state into key at now, keeping
// what both logs have counted (logstate.go); see limit.StateMover. Safe
// for concurrent use.
func (l *Log) Import(key string, state []byte, now int64, mark bool) error {
	in, err := decodeLog(state)
	if err != nil {
		return err
	}
	now = clampTime(now)
	if in.freshAt(now) {
		return nil
	}
	for {
		e := l.t.Get(key, now)
		e.Mu.Lock()
		if e.Dead() {
			e.Mu.Unlock()
			continue
		}
		local := imageOfLog(&e.State)
		m := mergeLogs(local, in, now)
		changed := !m.equal(local)
		if changed {
			before := e.State.heapBytes()
			setLog(&e.State, m)
			l.t.AddStateBytes(e.State.heapBytes() - before)
		}
		e.Mu.Unlock()
		l.t.Reclaim(e)
		if changed && mark {
			l.t.MarkChanged(key, e)
		}
		return nil
	}
}

// Delete removes key and reports whether it was held. A take that raced
// it starts over from a fresh key. Safe for concurrent use.
func (l *Log) Delete(key string) bool { return l.t.Delete(key) }

// Range calls fn with every key held until fn returns false, with no lock
// of the table held while fn runs. Safe for concurrent use.
func (l *Log) Range(fn func(key string) bool) { l.t.Range(fn) }

// Changed calls fn with up to max keys whose state a take (or an import)
// changed since they were last handed out, clearing their mark first, and
// returns how many; see limit.StateMover. Only a table made with
// table.Config.TrackChanges marks keys. Safe for concurrent use.
func (l *Log) Changed(max int, fn func(key string)) int { return l.t.DrainChanged(max, fn) }

// TrackChanges turns change tracking on or off (table.SetTrackChanges).
func (l *Log) TrackChanges(on bool) { l.t.SetTrackChanges(on) }

var (
	_ limit.StateMover = (*Fixed)(nil)
	_ limit.StateMover = (*Sliding)(nil)
	_ limit.StateMover = (*Log)(nil)
)
