package table

import "sync/atomic"

// index is a shard's map from key to entry: open addressing with linear
// probing over a power-of-two array of slots, each holding a key's hash,
// the key and its entry. It replaced a Go map[string]*Entry, for two
// reasons measured on a node's profile (docs/PERFORMANCE.md, "The hot path
// at batch 1000"): a lookup in a table larger than the caches waited for
// three misses one after the other (the map's group, the key's bytes to
// compare, the entry), and a Go map does not say where a key's slot is, so
// those misses could not be started ahead of time. Here the slot of a key
// is a function of its hash, which Table.Warm uses to overlap the misses
// of many lookups.
//
// A slot's home is the top bits of the hash (the shard is chosen by the
// low ones); a key sits at its home or after it, with no empty slot in
// between. Deletion shifts the following keys back instead of leaving a
// tombstone, so a lookup stops at the first empty slot. The array doubles
// when three quarters full and never shrinks, as a Go map.
//
// It is not safe for concurrent use: the shard's lock guards it, but for
// what Table.Warm reads without the lock (warm.go): the slot array as
// published in arr, and single words of its slots.
type index[S any] struct {
	slots []slot[S]
	n     int   // occupied slots
	shift uint8 // 64 - log2(len(slots))
	// arr is slots and shift, published anew by each grow for Warm.
	arr atomic.Pointer[slotArray[S]]
}

// slotArray is an array of slots with its shift; never changed once
// published (its slots are).
type slotArray[S any] struct {
	slots []slot[S]
	shift uint8
}

func (a *slotArray[S]) home(h uint64) int { return int(h >> a.shift) }

type slot[S any] struct {
	h   uint64
	key string
	e   *Entry[S] // nil: the slot is empty
}

const minSlots = 8

// init makes x an empty index.
func (x *index[S]) init() {
	x.slots, x.n, x.shift = make([]slot[S], minSlots), 0, 64-3
	x.publish()
}

func (x *index[S]) publish() { x.arr.Store(&slotArray[S]{slots: x.slots, shift: x.shift}) }

func (x *index[S]) home(h uint64) int { return int(h >> x.shift) }

// get returns the entry of key, whose hash is h, or nil.
func (x *index[S]) get(h uint64, key string) *Entry[S] {
	if i := x.find(h, key); i >= 0 {
		return x.slots[i].e
	}
	return nil
}

// find returns the slot of key, or -1.
//
// The race detector is told not to look at its reads, to keep a lookup
// under -race near a Go map's (which it checks as one access, where an
// instrumented probe is several per slot): package peer's timed lease
// tests took longer under -race with the index and sometimes ran out of
// time (docs/PERFORMANCE.md, "The hot path at batch 1000"). Its callers
// hold the shard's lock; the writes (put, removeAt, grow) stay checked.
//
//go:norace
func (x *index[S]) find(h uint64, key string) int {
	mask := len(x.slots) - 1
	for i := x.home(h); ; i = (i + 1) & mask {
		s := &x.slots[i]
		if s.e == nil {
			return -1
		}
		if s.h == h && s.key == key {
			return i
		}
	}
}

// put adds key, which must be absent, with its entry e.
func (x *index[S]) put(h uint64, key string, e *Entry[S]) {
	if 4*(x.n+1) > 3*len(x.slots) {
		x.grow()
	}
	x.place(slot[S]{h: h, key: key, e: e})
	x.n++
}

// place stores s in the first empty slot from its home on.
func (x *index[S]) place(s slot[S]) {
	mask := len(x.slots) - 1
	i := x.home(s.h)
	for x.slots[i].e != nil {
		i = (i + 1) & mask
	}
	x.slots[i] = s
}

func (x *index[S]) grow() {
	old := x.slots
	x.slots = make([]slot[S], 2*len(old))
	x.shift--
	for _, s := range old {
		if s.e != nil {
			x.place(s)
		}
	}
	x.publish()
}

// del removes key, whose hash is h, and reports whether it was there.
func (x *index[S]) del(h uint64, key string) bool {
	i := x.find(h, key)
	if i < 0 {
		return false
	}
	x.removeAt(i)
	return true
}

// removeAt empties slot i and moves back each following key of the run
// that may sit there: one whose home is not after i (cyclically) and at or
// before its own place, so that no key is left beyond an empty slot from
// its home.
func (x *index[S]) removeAt(i int) {
	mask := len(x.slots) - 1
	for j := (i + 1) & mask; x.slots[j].e != nil; j = (j + 1) & mask {
		k := x.home(x.slots[j].h)
		var stays bool // k in (i, j], cyclically: the key cannot move to i
		if i <= j {
			stays = i < k && k <= j
		} else {
			stays = i < k || k <= j
		}
		if !stays {
			x.slots[i] = x.slots[j]
			i = j
		}
	}
	x.slots[i] = slot[S]{}
	x.n--
}

// sample calls fn with up to max occupied slots, the first from start on
// (any int), until fn returns false.
func (x *index[S]) sample(start uint64, max int, fn func(key string, e *Entry[S]) bool) {
	mask := uint64(len(x.slots) - 1)
	for i, seen := uint64(0), 0; i <= mask && seen < max; i++ {
		s := &x.slots[(start+i)&mask]
		if s.e == nil {
			continue
		}
		seen++
		if !fn(s.key, s.e) {
			return
		}
	}
}
