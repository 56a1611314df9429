package peer

import (
	"unsafe"

	"github.com/shardlimiter/shardlimiter/limit"
	"github.com/shardlimiter/shardlimiter/ring"
)

// warmWindow is how many checks of a batch are warmed at a time: enough
// for their cache misses to overlap, few enough that what is warmed is
// still cached when their turn comes (table.WarmMax bounds it).
const warmWindow = 16 // at most 32: warm's skip mask

// warmer is a limiter whose table can warm the state of keys before they
// are taken (table.Table.Warm).
type warmer interface {
	Warm(keys []string)
}

// warm warms the table state of checks[from:to], to being from +
// warmWindow or the batch's end, which it returns: a batch decided in
// order calls it when it reaches to. With ring, only the checks whose key
// it gives this node (self) are warmed: an entry node forwards most of
// its checks, and warming a key it does not hold is a lookup of an absent
// key, a cache miss for nothing (8% of an entry node's CPU in a 3-node
// profile). A check of a partition moved here while the ring names
// another node is then not warmed: it is decided all the same. Without
// ring (CheckLocal: the keys are the owner's) all are warmed. With ring,
// the owners it finds are kept for Check (keyBuf.ownerOf). An invalid
// check's algorithm may not exist, and it is skipped.
func (n *Node) warm(kb *keyBuf, checks []limit.Check, from int, ring *ring.Snapshot, self int) (to int) {
	to = min(from+warmWindow, len(checks))
	var skip uint32 // bit i-from: checks[i] is not warmed
	if ring != nil {
		kb.ownersFrom = from
		for i := from; i < to; i++ {
			o := 0 // a ring of one: no hash (self, or the one member left when this node leaves)
			if ring.Len() > 1 {
				o = ring.OwnerIndex(checks[i].Key)
			}
			kb.owners[i-from] = int32(o)
			if o != self {
				skip |= 1 << (i - from)
			}
		}
	}
	var done [len(n.limiters)]bool
	for i := from; i < to; i++ {
		a := checks[i].Rule.Algorithm
		if int(a) >= len(n.limiters) || done[a] || skip&(1<<(i-from)) != 0 {
			continue
		}
		done[a] = true
		w, ok := n.limiters[a].(warmer)
		if !ok {
			continue
		}
		if keys := kb.warmKeys(checks[i:to], a, skip>>(i-from)); len(keys) > 0 {
			w.Warm(keys)
		}
	}
	return to
}

// warmKeys returns the table keys of the checks of algorithm a, but those
// whose bit is set in skip (bit i: checks[i]), built in a buffer of their
// own (kb.key's stays valid). They are valid until the next call.
func (kb *keyBuf) warmKeys(checks []limit.Check, a limit.Algorithm, skip uint32) []string {
	b, ends := kb.wb[:0], kb.wends[:0]
	for i := range checks {
		if c := &checks[i]; c.Rule.Algorithm == a && skip&(1<<i) == 0 {
			b = appendKey(b, c.Name, c.Key)
			ends = append(ends, len(b))
		}
	}
	keys := kb.wkeys[:0]
	for j, end := range ends {
		start := 0
		if j > 0 {
			start = ends[j-1]
		}
		keys = append(keys, unsafe.String(unsafe.SliceData(b[start:]), end-start))
	}
	kb.wb, kb.wends, kb.wkeys = b, ends, keys
	return keys
}

// ownerOf returns the ring's owner index of checks[i], i in the window
// warm last warmed with a ring.
func (kb *keyBuf) ownerOf(i int) int { return int(kb.owners[i-kb.ownersFrom]) }
