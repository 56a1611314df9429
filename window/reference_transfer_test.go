package window

import (
	"sort"

	"github.com/shardlimiter/shardlimiter/limit"
)

// The reference tables' state moving: the same formats and merges
// (state.go, logstate.go) on the reference's plain state, one mutex for
// everything. Comparing them with the optimized tables checks what those
// add: packing, the word/mutex hand-over, CAS from lock-free takers,
// retirement.

// cellOf returns s as a cell.
func (s refWindow) cellOf() cell {
	if s.prev == 0 && s.cur == 0 {
		return cell{}
	}
	g := refSlotExp(s.period)
	return cell{g: g, slot: s.end >> g, prev: s.prev, cur: s.cur}
}

// refWindowOf returns c as the reference's state: a period of c's octave
// and a window end in c's slot map onto every rule's windows as c does.
func refWindowOf(c cell) refWindow {
	return refWindow{period: 1 << c.g, end: c.slot << c.g, prev: c.prev, cur: c.cur}
}

func (t *refWindows) codec() *codec {
	if t.sliding {
		return &slidingCodec
	}
	return &fixedCodec
}

func (t *refWindows) Export(key string, now int64) ([]byte, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.m[key]
	now = clampTime(now)
	if s == nil || t.codec().fresh(s.cellOf(), now) {
		return nil, false
	}
	return encodeCell(t.codec().kind, s.cellOf()), true
}

func (t *refWindows) Import(key string, state []byte, now int64, mark bool) error {
	k := t.codec()
	in, err := decodeCell(state, k.kind)
	if err != nil {
		return err
	}
	now = clampTime(now)
	if k.fresh(in, now) {
		return nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.m[key]
	if s == nil {
		s = &refWindow{}
		t.m[key] = s
	}
	if c := s.cellOf(); k.merge(c, in, now) != c {
		*s = refWindowOf(k.merge(c, in, now))
		t.changed[key] = true
	}
	return nil
}

func (t *refWindows) Range(fn func(key string) bool) {
	t.mu.Lock()
	keys := sortedKeys(t.m)
	t.mu.Unlock()
	for _, k := range keys {
		if !fn(k) {
			return
		}
	}
}

func (t *refWindows) Delete(key string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	_, ok := t.m[key]
	delete(t.m, key)
	delete(t.changed, key)
	return ok
}

// TrackChanges does nothing: the reference always tracks.
func (t *refWindows) TrackChanges(bool) {}

func (t *refWindows) Changed(max int, fn func(key string)) int {
	t.mu.Lock()
	keys := drainSet(t.changed, max)
	t.mu.Unlock()
	for _, k := range keys {
		fn(k)
	}
	return len(keys)
}

// image returns s as a log image.
func (s *refLogKey) image() logImage {
	if s.idleAt == 0 {
		return logImage{}
	}
	im := logImage{idleAt: s.idleAt}
	for _, t := range s.times {
		if n := len(im.runs); n > 0 && im.runs[n-1].t == t {
			im.runs[n-1].n++
		} else {
			im.runs = append(im.runs, logRun{t, 1})
		}
	}
	return im
}

func refLogOf(im logImage) refLogKey {
	var s refLogKey
	for _, r := range im.runs {
		for range r.n {
			s.times = append(s.times, r.t)
		}
		s.last, s.idleAt = r.t, im.idleAt
	}
	return s
}

func (t *refLog) Export(key string, now int64) ([]byte, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.m[key]
	if s == nil || s.image().freshAt(clampTime(now)) {
		return nil, false
	}
	return encodeLog(s.image()), true
}

func (t *refLog) Import(key string, state []byte, now int64, mark bool) error {
	in, err := decodeLog(state)
	if err != nil {
		return err
	}
	now = clampTime(now)
	if in.freshAt(now) {
		return nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.m[key]
	if s == nil {
		s = &refLogKey{}
		t.m[key] = s
	}
	if local := s.image(); !mergeLogs(local, in, now).equal(local) {
		*s = refLogOf(mergeLogs(local, in, now))
		t.changed[key] = true
	}
	return nil
}

func (t *refLog) Range(fn func(key string) bool) {
	t.mu.Lock()
	keys := sortedKeys(t.m)
	t.mu.Unlock()
	for _, k := range keys {
		if !fn(k) {
			return
		}
	}
}

func (t *refLog) Delete(key string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	_, ok := t.m[key]
	delete(t.m, key)
	delete(t.changed, key)
	return ok
}

// TrackChanges does nothing: the reference always tracks.
func (t *refLog) TrackChanges(bool) {}

func (t *refLog) Changed(max int, fn func(key string)) int {
	t.mu.Lock()
	keys := drainSet(t.changed, max)
	t.mu.Unlock()
	for _, k := range keys {
		fn(k)
	}
	return len(keys)
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// drainSet removes and returns up to max keys of set.
func drainSet(set map[string]bool, max int) []string {
	var keys []string
	for _, k := range sortedKeys(set) {
		if len(keys) == max {
			break
		}
		keys = append(keys, k)
		delete(set, k)
	}
	return keys
}

var (
	_ limit.Limiter = (*refWindows)(nil)
	_ limit.Limiter = (*refLog)(nil)
)
