// Package table implements the concurrent keyed table that holds every
// limiter's per-key state: a power-of-two array of padded shards, each an
// index from key to *Entry (open addressing: index.go) behind a read-write
// mutex, with a key cap enforced by
// evicting the least recently used keys and a bounded sweep that drops idle
// keys.
//
// The table knows nothing of algorithms. An Entry carries a 64-bit Word for
// state that fits in one word (updated lock-free by compare-and-swap) and a
// mutex-guarded State S for state that does not. A new entry is all zero:
// algorithms must read a zero Word or zero State as "fresh key".
//
// # Retirement
//
// An entry leaves the table by being retired: its Word is set to Dead, and
// only then is it deleted from its shard's map. Takers that hold a pointer
// to an entry must treat Dead as "this entry is gone, look the key up
// again": a CAS from a live value fails once the word is Dead, and a
// mutex-based algorithm checks the word after locking Mu. This closes the
// race between a sweep (or an eviction) and a concurrent take: without it a
// take could update an entry already unlinked from the map, and the next
// take would start from a fresh state, admitting the same capacity twice.
//
// # Moving keys
//
// For handoff and replication the table lists its keys (Range, which calls
// out with no lock held), removes them (Delete, which retires the entry as
// an eviction does), and, with Config.TrackChanges, remembers which keys a
// take changed until a replicator drains them (MarkChanged, DrainChanged:
// changes.go, which writes out the race between marking and draining).
//
// # Concurrency
//
// All methods are safe for concurrent use. Lookups of existing keys take a
// shard read lock only; inserts, evictions, deletes and sweep deletions
// take the shard write lock briefly. The change lists have a small lock of
// their own per shard, never held with the shard's map lock. Nothing slow
// runs under a lock.
package table

import (
	"hash/maphash"
	"math"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
)

// Dead is the Word of a retired entry. Algorithms never store it.
const Dead int64 = math.MinInt64

// Defaults for Config.
const (
	DefaultMaxKeys = 1_000_000
	DefaultShards  = 256
)

// Config sizes a Table.
type Config struct {
	// MaxKeys caps the number of keys. When a shard is full, inserting a key
	// evicts the least recently used key of a small sample of that shard.
	// The cap is enforced per shard (MaxKeys/Shards, rounded up), so the
	// total may exceed MaxKeys by less than Shards. Zero means
	// DefaultMaxKeys.
	MaxKeys int
	// Shards is the number of shards, rounded up to a power of two. More
	// shards mean less lock contention and a coarser LRU. Zero means
	// DefaultShards; small tables (MaxKeys < 8×Shards) use fewer shards so
	// that the cap stays exact.
	Shards int
	// TrackChanges makes the table remember which keys a take changed,
	// for replication (changes.go: MarkChanged, DrainChanged). Off (the
	// zero value), marking costs a take one predictable branch; on, one
	// load while the key is marked, and a short per-shard lock and a key
	// copy when its mark is set, once per key per drain.
	TrackChanges bool
	// Budget, when set, bounds the bytes this table holds together with
	// every other table sharing it (see Budget). Nil: only MaxKeys bounds
	// the table.
	Budget *Budget
	// OnFirstKey, when set, is called each time a key is inserted into the
	// empty table, with no lock held, so that a sweeper can sleep while
	// the table is empty. It must not block and may be called
	// concurrently.
	OnFirstKey func()
	// OnChange, when set, is called each time a key is queued for
	// DrainChanged (its mark set: once per key per drain), with no lock
	// held, so that a replicator can sleep while nothing changes. It must
	// not block and may be called concurrently.
	OnChange func()
}

// evictSample is how many entries are compared to choose an eviction
// victim: the least recently used of them goes (sampled LRU, as Redis does).
const evictSample = 8

// touchGranularity is how stale an entry's last-use time may get before a
// take rewrites it. Rewriting on every take would make a hot key's cache
// line bounce between cores for no gain in LRU quality.
const touchGranularity = int64(1_000_000) // 1 ms

// Entry is one key's state. Word and State belong to the algorithm; the
// table only reads Word to see whether the entry is Dead, and writes Dead
// when it retires the entry (holding Mu while it does).
type Entry[S any] struct {
	// Word is state that fits in 64 bits, updated by CAS; Dead once retired.
	Word atomic.Int64
	// used is the last use, Unix ns, coarse (touchGranularity). Its lowest
	// bit is borrowed as the changed mark (changes.go): a mark then costs
	// no memory per key, and LRU order does not miss one nanosecond.
	used atomic.Int64
	// Mu guards State. An algorithm that uses State locks Mu and then
	// checks Word for Dead before touching State.
	Mu    sync.Mutex
	State S
}

// Dead reports whether the entry has been retired.
func (e *Entry[S]) Dead() bool { return e.Word.Load() == Dead }

// RetireWordIf retires the entry if idle reports its current word idle, and
// reports whether it did. The CAS guarantees no take slipped in between the
// check and the retirement.
func (e *Entry[S]) RetireWordIf(idle func(word int64) bool) bool {
	w := e.Word.Load()
	if w == Dead {
		return true
	}
	return idle(w) && e.Word.CompareAndSwap(w, Dead)
}

// RetireLockedIf retires the entry if idle reports its State idle, holding
// Mu, and reports whether it did.
func (e *Entry[S]) RetireLockedIf(idle func(s *S) bool) bool {
	e.Mu.Lock()
	defer e.Mu.Unlock()
	if e.Word.Load() == Dead {
		return true
	}
	if !idle(&e.State) {
		return false
	}
	e.Word.Store(Dead)
	return true
}

// kill retires the entry unconditionally (eviction). Holding Mu orders it
// with mutex-based takes; word-based takes see Dead on their next CAS.
func (e *Entry[S]) kill() {
	e.Mu.Lock()
	e.Word.Store(Dead)
	e.Mu.Unlock()
}

// RetireFunc retires e if its state is idle at now (equivalent to a fresh
// key), using RetireWordIf or RetireLockedIf, and reports whether e is
// retired. Sweep calls it without holding any table lock.
type RetireFunc[S any] func(e *Entry[S], now int64) bool

type shard[S any] struct {
	mu sync.RWMutex
	ix index[S]
	// chMu guards changes, the keys marked changed since they were last
	// drained (TrackChanges): a small lock of its own, never held with mu.
	chMu    sync.Mutex
	changes []change[S]
	_       [128 - 24 - 48 - 8 - 24]byte // keep each shard's locks on their own cache lines
}

// Table maps keys to entries. See the package doc for the protocol.
type Table[S any] struct {
	shards   []shard[S]
	mask     uint64
	seed     maphash.Seed
	shardCap int
	retire   RetireFunc[S]
	track    atomic.Bool // Config.TrackChanges, then SetTrackChanges
	// changeCap is the length at which a shard's change list is cleared
	// of retired entries before it grows (changes.go).
	changeCap int

	n         atomic.Int64
	evicted   atomic.Uint64
	budget    *Budget       // Config.Budget; nil for none
	bytes     atomic.Int64  // charged for the keys held (budget.go)
	overspent atomic.Uint64 // keys evicted for the budget
	entryCost int64         // what a key costs beside its bytes and state
	sized     bool          // *S reports its heap bytes (StateBytes)
	cursor    atomic.Uint64 // next shard Sweep visits
	drainNext atomic.Uint64 // shard DrainChanged starts at
	onFirst   func()        // Config.OnFirstKey; nil for none
	onChange  func()        // Config.OnChange; nil for none
	warmSink  atomic.Uint64 // written only when what Warm read sums to 1
}

// New returns an empty table. retire decides, for Sweep, whether an entry
// is idle and retires it.
func New[S any](cfg Config, retire RetireFunc[S]) *Table[S] {
	maxKeys := cfg.MaxKeys
	if maxKeys <= 0 {
		maxKeys = DefaultMaxKeys
	}
	shards := cfg.Shards
	if shards <= 0 {
		shards = DefaultShards
	}
	for shards > 1 && maxKeys < 8*shards {
		shards /= 2
	}
	n := 1
	for n < shards {
		n *= 2
	}
	t := &Table[S]{
		shards:   make([]shard[S], n),
		mask:     uint64(n - 1),
		seed:     maphash.MakeSeed(),
		shardCap: (maxKeys + n - 1) / n,
		retire:   retire,
		budget:   cfg.Budget,
		onFirst:  cfg.OnFirstKey,
		onChange: cfg.OnChange,
	}
	t.entryCost, t.sized = entryCost[S]()
	if t.budget != nil {
		t.budget.register(t)
	}
	t.track.Store(cfg.TrackChanges)
	t.changeCap = max(2*t.shardCap, 64)
	for i := range t.shards {
		t.shards[i].ix.init()
	}
	return t
}

// hash is a key's hash: its low bits choose the shard, its high bits the
// slot in the shard's index.
func (t *Table[S]) hash(key string) uint64 { return maphash.String(t.seed, key) }

func (t *Table[S]) shardOf(h uint64) *shard[S] { return &t.shards[h&t.mask] }

// Get returns the live entry for key, creating a zero one if the key is
// absent (evicting a least recently used key if its shard is full). now
// (Unix ns) records the use for LRU. The entry may be retired at any time
// after Get returns; callers retry Get when they find it Dead.
func (t *Table[S]) Get(key string, now int64) *Entry[S] {
	h := t.hash(key)
	sh := t.shardOf(h)
	sh.mu.RLock()
	e := sh.ix.get(h, key)
	sh.mu.RUnlock()
	if e != nil && !e.Dead() {
		if u := e.used.Load(); now-u > touchGranularity || now < u {
			// One attempt, keeping the mark: if it fails, another take
			// touched the entry or marked it, and the next take retries.
			e.used.CompareAndSwap(u, now&^markBit|u&markBit)
		}
		return e
	}
	return t.getIn(sh, h, key, now)
}

// getIn is Get's slow path for a key of sh that was absent or retired.
func (t *Table[S]) getIn(sh *shard[S], h uint64, key string, now int64) *Entry[S] {
	e, first := t.insert(sh, h, key, now)
	if first && t.onFirst != nil {
		t.onFirst()
	}
	if t.budget != nil && t.budget.over() {
		t.budget.reclaim(e)
	}
	return e
}

// GetEach is Get of n keys at once: it calls fn(i, e) with the live entry
// of key(i) for every i < n. The keys are grouped by shard and each
// shard's keys are looked up under one read lock, so a large batch (an
// imported push) takes a shard's lock once rather than once per key;
// absent keys are inserted as Get inserts them. fn runs with no lock of
// the table held, in shard order rather than in the order of i, and the
// entry it gets may be retired meanwhile, as with Get. scratch, when not
// nil, is reused for the grouping and returned for the next call.
func (t *Table[S]) GetEach(n int, key func(i int) string, now int64, scratch *EachScratch[S], fn func(i int, e *Entry[S])) {
	if n == 0 {
		return
	}
	if scratch == nil {
		scratch = &EachScratch[S]{}
	}
	// Counting sort of 0..n-1 by shard.
	sc := scratch
	sc.hash = sized(sc.hash, n)
	sc.shard = sized(sc.shard, n)
	sc.order = sized(sc.order, n)
	sc.start = sized(sc.start, len(t.shards)+1)
	clear(sc.start)
	for i := range n {
		h := t.hash(key(i))
		s := uint32(h & t.mask)
		sc.hash[i], sc.shard[i] = h, s
		sc.start[s+1]++
	}
	for s := 1; s < len(sc.start); s++ {
		sc.start[s] += sc.start[s-1]
	}
	for i := range n {
		s := sc.shard[i]
		sc.order[sc.start[s]] = int32(i)
		sc.start[s]++
	}
	// start[s] is now the end of shard s's run.
	sc.entries = sized(sc.entries, n)
	from := int32(0)
	for s := range t.shards {
		to := sc.start[s]
		if to == from {
			continue
		}
		sh := &t.shards[s]
		run := sc.order[from:to]
		sh.mu.RLock()
		for j, i := range run {
			sc.entries[from+int32(j)] = sh.ix.get(sc.hash[i], key(int(i)))
		}
		sh.mu.RUnlock()
		for j, i := range run {
			e := sc.entries[from+int32(j)]
			sc.entries[from+int32(j)] = nil
			if e != nil && !e.Dead() {
				if u := e.used.Load(); now-u > touchGranularity || now < u {
					e.used.CompareAndSwap(u, now&^markBit|u&markBit)
				}
			} else {
				e = t.getIn(sh, sc.hash[i], key(int(i)), now)
			}
			fn(int(i), e)
		}
		from = to
	}
}

// EachScratch holds GetEach's buffers between calls. Its zero value is
// ready; it is not safe for concurrent use.
type EachScratch[S any] struct {
	hash    []uint64
	shard   []uint32
	order   []int32
	start   []int32
	entries []*Entry[S]
}

// sized returns b with length n, reusing its array when large enough.
func sized[T any](b []T, n int) []T {
	if cap(b) < n {
		return make([]T, n)
	}
	return b[:n]
}

// Lookup returns the live entry for key like Get when insert is true.
// When insert is false an absent key is not inserted: a detached zero entry
// (a fresh key's state, in no map) stands in for it. Algorithms use this
// for peeks, which change nothing, so that a flood of peeks at unknown keys
// neither fills the table nor evicts the keys that are really in use.
func (t *Table[S]) Lookup(key string, now int64, insert bool) *Entry[S] {
	if insert {
		return t.Get(key, now)
	}
	h := t.hash(key)
	sh := t.shardOf(h)
	sh.mu.RLock()
	e := sh.ix.get(h, key)
	sh.mu.RUnlock()
	if e != nil && !e.Dead() {
		return e
	}
	d := &Entry[S]{}
	d.used.Store(markBit) // marked already: MarkChanged never queues it
	return d
}

// insert is Get's slow path: the key is absent, or mapped to a retired
// entry that a sweep has not unlinked yet.
// first reports that the table was empty before.
func (t *Table[S]) insert(sh *shard[S], h uint64, key string, now int64) (_ *Entry[S], first bool) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if i := sh.ix.find(h, key); i >= 0 {
		e := sh.ix.slots[i].e
		if !e.Dead() {
			return e, false
		}
		sh.ix.removeAt(i)
		t.n.Add(-1)
		t.release(key, e)
	}
	if sh.ix.n >= t.shardCap {
		t.evictLocked(sh)
	}
	e := &Entry[S]{}
	e.used.Store(now &^ markBit)
	sh.ix.put(h, strings.Clone(key), e)
	first = t.n.Add(1) == 1
	t.charge(t.keyCost(key))
	return e, first
}

// evictLocked removes the least recently used of a few entries of sh,
// sampled from a random slot on (keys sit in their index by hash, so
// neighbours in it are a random sample). sh.mu must be held for writing.
func (t *Table[S]) evictLocked(sh *shard[S]) {
	var (
		victimKey string
		victim    *Entry[S]
	)
	sh.ix.sample(rand.Uint64(), evictSample, func(k string, e *Entry[S]) bool {
		if victim == nil || e.used.Load() < victim.used.Load() {
			victimKey, victim = k, e
		}
		return true
	})
	if victim == nil {
		return
	}
	dead := victim.Dead()
	victim.kill()
	sh.ix.del(t.hash(victimKey), victimKey)
	t.n.Add(-1)
	t.release(victimKey, victim)
	if !dead {
		t.evicted.Add(1)
	}
}

// Sweep visits whole shards, starting where the previous Sweep stopped,
// until it has looked at about budget entries (at least one shard), and
// removes the entries that are idle at now. It returns how many it removed.
//
// Idleness is decided and entries retired under the shard's read lock, so
// takes on that shard go on meanwhile; only the deletion of retired entries
// takes the write lock.
func (t *Table[S]) Sweep(now int64, budget int) (removed int) {
	var dead []string
	for visited, i := 0, 0; i < len(t.shards) && (i == 0 || visited < budget); i++ {
		sh := &t.shards[t.cursor.Add(1)&t.mask]
		dead = dead[:0]
		sh.mu.RLock()
		visited += sh.ix.n
		dead = t.retireLocked(sh, now, dead)
		sh.mu.RUnlock()
		if len(dead) == 0 {
			continue
		}
		sh.mu.Lock()
		for _, k := range dead {
			h := t.hash(k)
			if i := sh.ix.find(h, k); i >= 0 && sh.ix.slots[i].e.Dead() {
				e := sh.ix.slots[i].e
				sh.ix.removeAt(i)
				t.n.Add(-1)
				t.release(k, e)
				removed++
			}
		}
		sh.mu.Unlock()
	}
	return removed
}

// Delete removes key and reports whether it was held (live). It retires
// the entry as an eviction does, holding its mutex, so a take that holds a
// pointer to it looks the key up again and starts from a fresh state
// rather than updating the removed one.
func (t *Table[S]) Delete(key string) bool {
	h := t.hash(key)
	sh := t.shardOf(h)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	i := sh.ix.find(h, key)
	if i < 0 {
		return false
	}
	e := sh.ix.slots[i].e
	live := !e.Dead()
	e.kill()
	sh.ix.removeAt(i)
	t.n.Add(-1)
	t.release(key, e)
	return live
}

// Peek returns the live entry of key, or nil when it is absent. It never
// inserts and does not count as a use.
func (t *Table[S]) Peek(key string) *Entry[S] {
	h := t.hash(key)
	sh := t.shardOf(h)
	sh.mu.RLock()
	e := sh.ix.get(h, key)
	sh.mu.RUnlock()
	if e == nil || e.Dead() {
		return nil
	}
	return e
}

// Range calls fn with every live key, shard by shard, until fn returns
// false. A shard's keys are copied under its read lock and fn runs with no
// lock held, so fn may use the table (Get, Peek, Delete). Keys added or
// removed meanwhile may or may not be visited.
func (t *Table[S]) Range(fn func(key string) bool) {
	var keys []string
	for i := range t.shards {
		sh := &t.shards[i]
		keys = keys[:0]
		sh.mu.RLock()
		sh.ix.sample(0, sh.ix.n, func(k string, e *Entry[S]) bool {
			if !e.Dead() {
				keys = append(keys, k)
			}
			return true
		})
		sh.mu.RUnlock()
		for _, k := range keys {
			if !fn(k) {
				return
			}
		}
	}
}

// Len returns the number of keys held (retired entries not yet unlinked
// included).
func (t *Table[S]) Len() int { return int(t.n.Load()) }

// Evicted returns how many live keys were evicted to respect the cap.
func (t *Table[S]) Evicted() uint64 { return t.evicted.Load() }

// EvictedForBytes returns how many live keys were evicted to respect the
// byte budget (Config.Budget).
func (t *Table[S]) EvictedForBytes() uint64 { return t.overspent.Load() }

// Cap returns the effective key cap (per-shard cap × shards).
func (t *Table[S]) Cap() int { return t.shardCap * len(t.shards) }

// UpdateWord runs the lock-free read-modify-write of key's Word: f maps the
// current word to the new one and a result, and is retried until the CAS
// succeeds; a retired entry is looked up again. f must be pure: it may run
// several times. When f returns the word unchanged no write happens.
func UpdateWord[S, R any](t *Table[S], key string, now int64, f func(word int64) (int64, R)) R {
	for {
		e := t.Get(key, now)
		for {
			w := e.Word.Load()
			if w == Dead {
				break
			}
			nw, r := f(w)
			if nw == w || e.Word.CompareAndSwap(w, nw) {
				return r
			}
		}
	}
}

// UpdateLocked runs f on key's State with the entry's mutex held; a retired
// entry is looked up again. f must not block.
func UpdateLocked[S, R any](t *Table[S], key string, now int64, f func(s *S) R) R {
	for {
		e := t.Get(key, now)
		e.Mu.Lock()
		if e.Word.Load() != Dead {
			r := f(&e.State)
			e.Mu.Unlock()
			return r
		}
		e.Mu.Unlock()
	}
}
