package peer

import (
	"unsafe"

	"github.com/shardlimiter/shardlimiter/limit"
)

// warmWindow is how many checks of a batch are warmed at a time: enough
// for their cache misses to overlap, few enough that what is warmed is
// still cached when their turn comes (table.WarmMax bounds it).
const warmWindow = 16

// warmer is a limiter whose table can warm the state of keys before they
// are taken (table.Table.Warm).
type warmer interface {
	Warm(keys []string)
}

// warm warms the table state of checks[from:to], to being from +
// warmWindow or the batch's end, which it returns: a batch decided in
// order calls it when it reaches to. Checks bound elsewhere are warmed
// too (a lookup of an absent key, one overlapped miss); an invalid
// check's algorithm may not exist, and it is skipped.
func (n *Node) warm(kb *keyBuf, checks []limit.Check, from int) (to int) {
	to = min(from+warmWindow, len(checks))
	var done [len(n.limiters)]bool
	for i := from; i < to; i++ {
		a := checks[i].Rule.Algorithm
		if int(a) >= len(n.limiters) || done[a] {
			continue
		}
		done[a] = true
		w, ok := n.limiters[a].(warmer)
		if !ok {
			continue
		}
		w.Warm(kb.warmKeys(checks[i:to], a))
	}
	return to
}

// warmKeys returns the table keys of the checks of algorithm a, built in
// a buffer of their own (kb.key's stays valid). They are valid until the
// next call.
func (kb *keyBuf) warmKeys(checks []limit.Check, a limit.Algorithm) []string {
	b, ends := kb.wb[:0], kb.wends[:0]
	for i := range checks {
		if c := &checks[i]; c.Rule.Algorithm == a {
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
