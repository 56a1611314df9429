// Package cowmap is a bounded copy-on-write map for values bound once per
// key and read on every call, such as the counters of a metric label value:
// a read loads the current map through an atomic pointer and takes no lock;
// adding a key takes a mutex, copies the map and publishes the copy. Adding
// costs O(n), so the map suits keys that arrive rarely and are bounded (the
// per-rule metrics of peer/rulemetrics.go and rls/rulemetrics.go).
//
// It is a leaf package: standard library only.
package cowmap

import (
	"maps"
	"sync"
	"sync/atomic"
)

// Map is a copy-on-write map from K to V holding at most its bound of
// keys. The zero Map is empty and unbounded. Every method is safe for
// concurrent use; a Map must not be copied after first use.
type Map[K comparable, V any] struct {
	max int // ≤ 0: no bound
	cur atomic.Pointer[map[K]V]
	mu  sync.Mutex // serializes additions
}

// New returns an empty Map that holds at most max keys (max ≤ 0: no bound).
func New[K comparable, V any](max int) *Map[K, V] {
	return &Map[K, V]{max: max}
}

// Load returns k's value and whether k is held. It takes no lock.
func (m *Map[K, V]) Load(k K) (V, bool) {
	if p := m.cur.Load(); p != nil {
		v, ok := (*p)[k]
		return v, ok
	}
	var zero V
	return zero, false
}

// Len returns the number of keys held. It takes no lock.
func (m *Map[K, V]) Len() int {
	if p := m.cur.Load(); p != nil {
		return len(*p)
	}
	return 0
}

// full reports whether a map of n keys is at the bound.
func (m *Map[K, V]) full(n int) bool { return m.max > 0 && n >= m.max }

// LoadOrAdd returns k's value, adding it when k is absent and the bound
// leaves room: then it calls bind, with the Map's mutex held, and when bind
// reports ok publishes a copy of the map holding k and its value. bind runs
// at most once per key added, never concurrently with another bind of the
// same Map, so it may update state the caller guards by that (a second
// bound, say); it must not call the Map. ok is false, with V's zero value,
// when k is absent and was not added: the Map is full or bind declined.
func (m *Map[K, V]) LoadOrAdd(k K, bind func() (V, bool)) (v V, ok bool) {
	if v, ok := m.Load(k); ok {
		return v, true
	}
	if m.full(m.Len()) {
		return v, false
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	var cur map[K]V
	if p := m.cur.Load(); p != nil {
		cur = *p
	}
	if v, ok := cur[k]; ok {
		return v, true
	}
	if m.full(len(cur)) {
		return v, false
	}
	nv, ok := bind()
	if !ok {
		return v, false
	}
	next := maps.Clone(cur)
	if next == nil {
		next = make(map[K]V, 1)
	}
	next[k] = nv
	m.cur.Store(&next)
	return nv, true
}
