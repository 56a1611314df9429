package peer

import (
	"encoding/binary"
	"unsafe"

	"github.com/shardlimiter/shardlimiter/peer/rulemetrics"
)

// keyBuf builds table keys for one batch without allocating per check.
//
// A table key is uvarint(len(name)) ‖ name ‖ unique_key. The length prefix
// makes it unambiguous: name "a_b" with key "c" and name "a" with key "b_c"
// differ in their first byte. (A separator byte would need names that cannot
// contain it.)
//
// The returned string aliases the buffer and is valid only until the next
// call. That is safe because the tables never keep the string they are
// given: they copy it (strings.Clone) when they insert a key.
//
// It also carries the batch's per-rule tally (package rulemetrics): put it
// back with Node.putKeyBuf, which flushes the tally.
type keyBuf struct {
	b     []byte
	tally rulemetrics.Tally
	// wb, wends and wkeys hold the keys of the checks being warmed
	// (warm.go).
	wb    []byte
	wends []int
	wkeys []string
	// owners[i-ownersFrom] is the ring's owner index of check i of the
	// window warm last warmed with a ring (warm.go), for Check.
	owners     [warmWindow]int32
	ownersFrom int
}

func (k *keyBuf) key(name, key string) string {
	b := appendKey(k.b[:0], name, key)
	k.b = b
	return unsafe.String(unsafe.SliceData(b), len(b))
}

// appendKey appends the table key of (name, key) to b.
func appendKey(b []byte, name, key string) []byte {
	b = binary.AppendUvarint(b, uint64(len(name)))
	b = append(b, name...)
	return append(b, key...)
}

// putKeyBuf flushes kb's per-rule tally and returns it to the pool.
func (n *Node) putKeyBuf(kb *keyBuf) {
	kb.tally.Flush()
	n.keyBufs.Put(kb)
}
