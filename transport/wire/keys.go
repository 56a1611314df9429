package wire

import "unicode/utf8"

// The keys of a decoded batch. Keys rarely repeat within a batch, and a
// string per key was most of the allocations of a forwarded batch (100
// of 129 for 100 checks). So DecodeChecks appends each item's key bytes
// to one buffer, reused across batches, and once the batch is read makes
// one string of the buffer; each check's Key is a substring of it.
//
// The strings are ordinary immutable strings: whoever keeps a key past the
// call (a table inserting it, a lease) may keep it as it is, and is still
// correct. It keeps the whole batch's keys alive with it, though, so what
// is kept for long clones the key (the tables do, strings.Clone on insert;
// the node builds its table keys in a buffer of its own, peer/keys.go).

// keySpan is where a key lies in the batch's key bytes: [lo, hi).
type keySpan struct{ lo, hi int }

// maxKeptKeyBytes bounds the key buffer a pooled Checks keeps between
// batches; a batch of longer keys gets a buffer of its own.
const maxKeptKeyBytes = 64 << 10

// addKey checks that b is UTF-8 and appends it as the current item's key;
// the last key field of an item wins, as in proto.Unmarshal.
func (d *requestDecoder) addKey(b []byte) error {
	if !utf8.Valid(b) {
		return errInvalidUTF8
	}
	lo := len(d.keys)
	d.keys = append(d.keys, b...)
	d.key = keySpan{lo: lo, hi: len(d.keys)}
	return nil
}

// setKeys gives every decoded check its key, from one string of d.keys,
// and keeps d.keys' memory for the next batch.
func (c *Checks) setKeys(d *requestDecoder) {
	if len(d.keys) > 0 {
		all := string(d.keys) // the batch's one allocation for its keys
		for i, sp := range c.keySpans {
			c.Checks[i].Key = all[sp.lo:sp.hi]
		}
	}
	c.keyBytes = d.keys[:0]
	c.keySpans = c.keySpans[:0]
}

// resetKeys empties the key memory, dropping a buffer grown too large.
func (c *Checks) resetKeys() {
	if cap(c.keyBytes) > maxKeptKeyBytes {
		c.keyBytes = nil
	}
	c.keyBytes, c.keySpans = c.keyBytes[:0], c.keySpans[:0]
}
