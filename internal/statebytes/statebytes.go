// Package statebytes reads the fields of one key's encoded state, the bytes
// a leaf algorithm package (bucket, window) exports for handoff and
// replication and decodes on import: single bytes, minimal uvarints (signed,
// counts and length-prefixed strings too) and little-endian float64s, with the first error kept so that a decoder reads
// every field and checks once.
//
// Lease records (peer/leasing) are read with it too.
//
// It is a leaf package: standard library only.
package statebytes

import (
	"encoding/binary"
	"fmt"
	"math"
)

// Reader reads a state's fields from the front of its bytes. After the
// first error every read returns zero and the error sticks. A Reader is
// used by one goroutine.
type Reader struct {
	b         []byte
	err       error
	malformed error
}

// NewReader returns a Reader of b whose errors wrap malformed, the caller's
// "malformed key state" error.
func NewReader(b []byte, malformed error) Reader {
	return Reader{b: b, malformed: malformed}
}

// Err returns the first error, or nil.
func (r *Reader) Err() error { return r.err }

// Len returns the number of bytes not read yet.
func (r *Reader) Len() int { return len(r.b) }

func (r *Reader) fail(what string) {
	if r.err == nil {
		r.err = fmt.Errorf("%w: %s", r.malformed, what)
	}
}

// Byte reads one byte.
func (r *Reader) Byte() byte {
	if r.err != nil || len(r.b) == 0 {
		r.fail("truncated")
		return 0
	}
	c := r.b[0]
	r.b = r.b[1:]
	return c
}

// Uvarint reads a minimal uvarint: a value has one encoding, so a state has
// one encoding too, and a longer one is an error.
func (r *Reader) Uvarint() uint64 {
	if r.err != nil {
		return 0
	}
	x, n := binary.Uvarint(r.b)
	if n <= 0 || n > 1 && r.b[n-1] == 0 {
		r.fail("bad varint")
		return 0
	}
	r.b = r.b[n:]
	return x
}

// Varint reads a minimal zig-zag varint (a signed value; see Uvarint).
func (r *Reader) Varint() int64 {
	u := r.Uvarint()
	return int64(u>>1) ^ -int64(u&1)
}

// Int reads a minimal uvarint that must fit a non-negative int64.
func (r *Reader) Int() int64 {
	u := r.Uvarint()
	if u > math.MaxInt64 {
		r.fail("a count out of range")
		return 0
	}
	return int64(u)
}

// String reads a length (a minimal uvarint) and that many bytes, at most
// limit of them.
func (r *Reader) String(limit int) string {
	n := r.Uvarint()
	if r.err != nil {
		return ""
	}
	if n > uint64(limit) || n > uint64(len(r.b)) {
		r.fail(fmt.Sprintf("a string of %d bytes", n))
		return ""
	}
	s := string(r.b[:n])
	r.b = r.b[n:]
	return s
}

// Float64 reads a float64 as its 8 bytes of IEEE 754 bits, little endian.
func (r *Reader) Float64() float64 {
	if r.err != nil || len(r.b) < 8 {
		r.fail("truncated")
		return 0
	}
	f := math.Float64frombits(binary.LittleEndian.Uint64(r.b))
	r.b = r.b[8:]
	return f
}

// End returns the first error, or an error if bytes are left over.
func (r *Reader) End() error {
	if r.err == nil && len(r.b) != 0 {
		r.fail(fmt.Sprintf("%d trailing bytes", len(r.b)))
	}
	return r.err
}
