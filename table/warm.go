package table

import (
	"unsafe"
)

// WarmMax is the most keys Warm looks at in one call.
const WarmMax = 32

// Warm brings into the caches what Get, Lookup and Peek of each of keys
// (up to WarmMax) will read, and changes nothing.
//
// Why: in a table larger than the caches a lookup waits for up to three
// cache misses one after the other (the key's slot, the slot key's bytes
// that it compares, the entry): about 0.5 µs a check on the development
// machine. Warm starts those loads for many keys at once, in two rounds
// (every key's slot, then every entry and key found), so that their
// misses overlap and the lookups that follow find their lines cached: a
// batch of checks waits for about two misses per call of Warm instead of
// three per key (docs/PERFORMANCE.md, "The hot path at batch 1000").
//
// Warm takes no lock: a lock's atomic instruction waits for every load
// before it to complete, which would make the misses of the keys follow
// one another again. So it reads the index while writers may change it,
// and it is written to be safe so: it reads the slot array as published
// (index.arr, never changed in length), single machine words of slots
// (which Go never tears: a hash, an entry pointer, a key's data
// pointer), and their values only choose what to load next. A slot
// changed meanwhile makes it warm the wrong line, never read out of
// bounds. The race detector is told not to look at these reads.
//
// Under the race detector Warm does nothing: its reads are not checked
// there, and the time it would take (a hash and a probe per key, beside
// the instrumented lookup that follows) slows the timed tests of the
// packages above it.
//
//go:norace
func (t *Table[S]) Warm(keys []string) {
	if raceEnabled {
		return
	}
	keys = keys[:min(len(keys), WarmMax)]
	var hs [WarmMax]uint64
	var arrs [WarmMax]*slotArray[S]
	var sink uint64
	for i, k := range keys {
		h := t.hash(k)
		a := t.shardOf(h).ix.arr.Load()
		hs[i], arrs[i] = h, a
		sink += a.slots[a.home(h)].h
	}
	for i := range keys {
		sink += warmSlot(arrs[i], hs[i])
	}
	if sink == 1 {
		t.warmSink.Add(1) // a use of sink, so that its loads are kept
	}
}

// warmSlot loads the entry and the key's bytes of the first slot from h's
// home on that holds hash h, and returns the bytes it read.
//
//go:norace
func warmSlot[S any](a *slotArray[S], h uint64) uint64 {
	mask := len(a.slots) - 1
	for i, n := a.home(h), 0; n <= mask; i, n = (i+1)&mask, n+1 {
		s := &a.slots[i]
		e := s.e
		if e == nil {
			return 0
		}
		if s.h != h {
			continue
		}
		p := unsafe.Pointer(e)
		v := uint64(*(*byte)(p)) + uint64(*(*byte)(unsafe.Add(p, unsafe.Sizeof(*e)-1)))
		if kp := *(**byte)(unsafe.Pointer(&s.key)); kp != nil {
			v += uint64(*kp)
		}
		return v
	}
	return 0
}

// sweepChunk is how many entries a sweep loads before it asks the
// RetireFunc about them.
const sweepChunk = 16

// retireLocked asks the RetireFunc about every entry of sh, holding sh.mu
// for reading, and appends the keys of those it retired to dead.
//
// Why in chunks: a table larger than the caches makes the sweep wait for
// one cache miss per entry (the slots are read in order, the entries are
// scattered over the heap), and the RetireFunc's calls keep the processor
// from running far enough ahead to overlap them. So it first loads the
// entries of sweepChunk slots (touchEntry), whose misses overlap, and
// then retires them from the caches (docs/PERFORMANCE.md, "Batch 1000 and
// idle").
func (t *Table[S]) retireLocked(sh *shard[S], now int64, dead []string) []string {
	var keys [sweepChunk]string
	var es [sweepChunk]*Entry[S]
	n := 0
	var sink uint64
	flush := func() {
		for i, e := range es[:n] {
			if t.retire(e, now) {
				dead = append(dead, keys[i])
			}
		}
		n = 0
	}
	sh.ix.sample(0, sh.ix.n, func(k string, e *Entry[S]) bool {
		keys[n], es[n] = k, e
		sink += touchEntry(e)
		if n++; n == sweepChunk {
			flush()
		}
		return true
	})
	flush()
	if sink == 1 {
		t.warmSink.Add(1) // a use of sink, so that its loads are kept
	}
	return dead
}

// touchEntry loads the first and the last byte of e, and so its cache
// lines, and returns them. Reading bytes that other goroutines change
// atomically is memory-safe here (single bytes, used only as a sum that
// is thrown away, see Warm); the race detector is told not to look.
//
//go:norace
func touchEntry[S any](e *Entry[S]) uint64 {
	p := unsafe.Pointer(e)
	return uint64(*(*byte)(p)) + uint64(*(*byte)(unsafe.Add(p, unsafe.Sizeof(*e)-1)))
}
