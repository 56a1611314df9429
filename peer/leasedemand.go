package peer

import (
	"hash/maphash"
	"sync/atomic"
	"time"
)

// The lessee's demand sketch: which forwarded keys may be hot enough for
// a lease, known without a lock or a map lookup.
//
// A node forwards mostly cold keys (100,000 keys spread evenly: each is
// checked about once a second), and only a key forwarded above
// Config.LeaseThreshold is worth a lease. Tracking every forwarded key in
// the holder's map made each forwarded check a map lookup under the
// holder's lock, and once the map was full (maxHeldKeys) a write lock as
// well: one global lock per forwarded check (5.8% of an entry node's CPU
// in a 3-node profile). The sketch is an array of counters, one per slot
// of a hash of the key, each counting the checks of its keys in the
// current leaseWindow. A check adds one to its key's slot; the key enters
// the map only once its slot's count reaches the threshold's share of a
// window. A slot counts all its keys, so the count is never below the
// key's own: a key as hot as the threshold always gets in (a window
// later at most), and a cold key gets in only when its slot's other keys
// are together that hot (rare at demandSlots slots; the map's bound holds
// anyway). Once in, the key's own rate (heldKey.observe) decides whether
// it is leased.
//
// Each slot also counts the keys of the map that hash to it, in the same
// word as its count, so a check whose slot tracks none and is under the
// threshold costs one atomic add (and a load) and no lock.

// demandSlots is the number of counters of the sketch, a power of two:
// 8,192 words, 64 KiB, small enough to stay in cache (16-byte slots, 256
// KiB, cost a cache miss per forwarded check: 3% of an entry node's CPU).
// At 100,000 forwarded checks a second spread over many keys a slot sees
// about 1.2 checks per window.
const demandSlots = 1 << 13

// A slot's word: the window's number (now / leaseWindow, modulo 2^16),
// the keys tracked (up to maxHeldKeys, under 2^16), the checks counted in
// the window (never near 2^32 in one).
const (
	slotWindowShift  = 48
	slotTrackedShift = 32
	slotTrackedOne   = 1 << slotTrackedShift
	slotCountMask    = 1<<slotTrackedShift - 1
	slotTrackedMask  = (1<<16 - 1) << slotTrackedShift
)

// demandSlot is one counter of the sketch. Its tracked keys change with
// the holder's mu held for writing (track, untrack); its count without.
type demandSlot struct{ w atomic.Uint64 }

func (s *demandSlot) track()   { s.w.Add(slotTrackedOne) }
func (s *demandSlot) untrack() { s.w.Add(^uint64(slotTrackedOne - 1)) }

// tracked returns the keys of the holder's map in the slot.
func (s *demandSlot) tracked() int { return int(s.w.Load() & slotTrackedMask >> slotTrackedShift) }

// demand is a leaseHolder's sketch. Safe for concurrent use.
type demand struct {
	seed  maphash.Seed
	enter uint64 // checks of a slot in one window that let a key in
	slots []demandSlot
}

func newDemand(threshold int64) *demand {
	return &demand{
		seed:  maphash.MakeSeed(),
		enter: uint64(max(threshold*int64(leaseWindow)/int64(time.Second), 1)),
		slots: make([]demandSlot, demandSlots),
	}
}

// slot returns the slot of key.
func (d *demand) slot(key string) *demandSlot {
	return &d.slots[maphash.String(d.seed, key)&(demandSlots-1)]
}

// add counts a check of the slot at now. It reports whether the slot's
// count in the current window has reached the threshold, and whether the
// slot tracks any key.
func (d *demand) add(s *demandSlot, now int64) (hot, tracked bool) {
	w := uint64(now/int64(leaseWindow)) << slotWindowShift
	for {
		v := s.w.Load()
		if v&^(slotTrackedMask|slotCountMask) == w {
			v = s.w.Add(1)
			return v&slotCountMask >= d.enter, v&slotTrackedMask != 0
		}
		// A new window: the first check in it starts the count again.
		if s.w.CompareAndSwap(v, w|v&slotTrackedMask|1) {
			return d.enter <= 1, v&slotTrackedMask != 0
		}
	}
}
