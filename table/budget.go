package table

import (
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"unsafe"
)

// Budget bounds the bytes that several tables hold together: every table
// made with the same Config.Budget charges it for its keys, and when the
// total goes over the bound the least recently used keys of any of them
// are evicted until it is back under (sampled LRU across tables: each
// table offers the least recently used of a few keys of one random shard,
// and the oldest offer goes).
//
// # What a key costs
//
// The charge is an estimate of the heap a key holds, close enough to bound
// the process and cheap enough for the insert path: a per-entry constant
// for the entry and its map slot (entryBytes), the key's bytes rounded up
// to the allocator's 8-byte granularity, and whatever the state reports
// through StateBytes (a SLIDING_LOG key's log). Small per-key extras that
// only some keys allocate (a warm-up record, a wide window cell) are not
// charged; they are bounded by the key cap.
//
// # Where eviction runs
//
// Never under a lock: a table charges while it holds a shard or an entry
// lock (so that the charge and the key it pays for appear together), and
// reclaims only after releasing it, because an eviction takes other
// shards' and entries' locks. One goroutine reclaims at a time; others
// that find the budget over go on, unless it is over by more than an
// eighth, where they wait for the reclaimer: that bounds the overshoot
// when inserts outrun one evicting goroutine.
//
// All methods are safe for concurrent use.
type Budget struct {
	max  int64
	held atomic.Int64

	mu      sync.Mutex // the reclaimer
	members atomic.Pointer[[]reclaimer]
	regMu   sync.Mutex // serializes register
}

// reclaimer is one table as a Budget sees it.
type reclaimer interface {
	// victim offers the least recently used of a small sample of keys,
	// never skip, or ok false when it found none.
	victim(skip any) (key string, used int64, ok bool)
	// evictKey removes key for the budget, unless it is skip, and reports
	// whether it removed a live key.
	evictKey(key string, skip any) bool
}

// NewBudget returns a budget of maxBytes (> 0).
func NewBudget(maxBytes int64) *Budget {
	b := &Budget{max: max(maxBytes, 1)}
	b.members.Store(&[]reclaimer{})
	return b
}

// Max returns the bound, in bytes.
func (b *Budget) Max() int64 { return b.max }

// Held returns the bytes charged now.
func (b *Budget) Held() int64 { return b.held.Load() }

func (b *Budget) register(r reclaimer) {
	b.regMu.Lock()
	defer b.regMu.Unlock()
	old := *b.members.Load()
	next := append(append(make([]reclaimer, 0, len(old)+1), old...), r)
	b.members.Store(&next)
}

// over reports whether the budget needs reclaiming. One load: the insert
// path calls it on every new key.
func (b *Budget) over() bool { return b.held.Load() > b.max }

// reclaim evicts least recently used keys until the budget is met, never
// skip (the entry whose insert called it: evicting it would make its
// caller look the key up again and insert it again, forever, when one key
// is over the whole budget). It must be called with no table lock held.
func (b *Budget) reclaim(skip any) {
	if !b.over() {
		return
	}
	if !b.mu.TryLock() {
		if b.held.Load() <= b.max+b.max/8 {
			return // someone is reclaiming; a small overshoot is fine
		}
		b.mu.Lock()
	}
	defer b.mu.Unlock()
	members := *b.members.Load()
	for misses := 0; b.over() && misses < 4; {
		var (
			best     reclaimer
			bestKey  string
			bestUsed int64
		)
		// Start at a random member so that ties do not always fall on
		// the same table.
		off := rand.IntN(len(members) + 1)
		for i := range members {
			r := members[(i+off)%len(members)]
			if k, u, ok := r.victim(skip); ok && (best == nil || u < bestUsed) {
				best, bestKey, bestUsed = r, k, u
			}
		}
		if best == nil || !best.evictKey(bestKey, skip) {
			misses++ // an empty sample, a key gone meanwhile, or skip
			continue
		}
		misses = 0
	}
}

// mapSlotBytes estimates what one key costs its shard's index: a slot of
// 32 bytes (hash, key header, entry pointer) in an array between 3/8 and
// 3/4 full (index.go). Calibrated against the heap per key measured by
// the algorithms' HeapPerKey benchmarks.
const mapSlotBytes = 56

// StateSizer is implemented by states (*S) that hold heap memory of their
// own beyond the entry, such as a log buffer. A table of such states
// charges its budget for HeapBytes when it learns of it (AddStateBytes) and
// credits it back when the key goes, reading HeapBytes of the retired
// state.
type StateSizer interface {
	// HeapBytes returns the bytes the state holds on the heap beyond its
	// own struct. Called with the entry's mutex held or after retirement.
	HeapBytes() int64
}

// entryCost returns what a key of a Table[S] costs beside its key bytes,
// and whether *S is a StateSizer.
func entryCost[S any]() (int64, bool) {
	_, sized := any(new(S)).(StateSizer)
	return roundAlloc(int64(unsafe.Sizeof(Entry[S]{}))) + mapSlotBytes, sized
}

// roundAlloc rounds n up to the allocator's granularity (16 bytes beyond
// the smallest size classes; close enough for an estimate).
func roundAlloc(n int64) int64 {
	if n <= 8 {
		return 8
	}
	return (n + 15) &^ 15
}

func (t *Table[S]) keyCost(key string) int64 { return t.entryCost + roundAlloc(int64(len(key))) }

func (t *Table[S]) charge(n int64) {
	t.bytes.Add(n)
	if t.budget != nil {
		t.budget.held.Add(n)
	}
}

// release credits what key and its retired entry e cost. Called once per
// entry, by whoever unlinks it from its shard's map.
func (t *Table[S]) release(key string, e *Entry[S]) {
	n := t.keyCost(key)
	if t.sized {
		n += any(&e.State).(StateSizer).HeapBytes()
	}
	t.charge(-n)
}

// AddStateBytes charges delta bytes (negative to credit) that a state has
// come to hold or let go of (StateSizer). Call it with the entry's mutex
// held and the entry live, right where the state changes size, so that
// its retirement credits exactly what was charged; then call Reclaim once
// the mutex is released.
func (t *Table[S]) AddStateBytes(delta int64) {
	if delta != 0 {
		t.charge(delta)
	}
}

// Reclaim evicts keys of the budget's tables while the budget is over,
// never e (the caller's own entry). Call it with no lock held. It is one
// load when the budget is met or the table has none.
func (t *Table[S]) Reclaim(e *Entry[S]) {
	if t.budget != nil && t.budget.over() {
		t.budget.reclaim(e)
	}
}

// Bytes returns the bytes charged for the keys held.
func (t *Table[S]) Bytes() int64 { return t.bytes.Load() }

// victim samples the first non-empty shard from a random one on. A sparse
// table has many empty shards: victim may look at all of them, but only
// while the budget is over, and never for a table with no key.
func (t *Table[S]) victim(skip any) (key string, used int64, ok bool) {
	if t.n.Load() <= 0 {
		return "", 0, false
	}
	start := rand.Uint64()
	for i := range uint64(len(t.shards)) {
		sh := &t.shards[(start+i)&t.mask]
		sh.mu.RLock()
		seen := 0
		sh.ix.sample(rand.Uint64(), sh.ix.n, func(k string, e *Entry[S]) bool {
			if any(e) == skip {
				return true
			}
			if u := e.used.Load() &^ markBit; !ok || u < used {
				key, used, ok = k, u, true
			}
			seen++
			return seen < evictSample
		})
		sh.mu.RUnlock()
		if ok {
			return key, used, true
		}
	}
	return "", 0, false
}

func (t *Table[S]) evictKey(key string, skip any) bool {
	h := t.hash(key)
	sh := t.shardOf(h)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	i := sh.ix.find(h, key)
	if i < 0 || any(sh.ix.slots[i].e) == skip {
		return false
	}
	e := sh.ix.slots[i].e
	dead := e.Dead()
	e.kill()
	sh.ix.removeAt(i)
	t.n.Add(-1)
	t.release(key, e)
	if !dead {
		t.overspent.Add(1)
	}
	return true
}
