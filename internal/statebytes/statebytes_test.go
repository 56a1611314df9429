package statebytes

import (
	"encoding/binary"
	"errors"
	"math"
	"testing"
)

var errBad = errors.New("test: malformed key state")

func TestReadsEachField(t *testing.T) {
	b := []byte{7}
	b = binary.AppendUvarint(b, 300)
	b = binary.LittleEndian.AppendUint64(b, math.Float64bits(2.5))
	r := NewReader(b, errBad)
	if got := r.Byte(); got != 7 {
		t.Errorf("Byte = %d, want 7", got)
	}
	if got := r.Uvarint(); got != 300 {
		t.Errorf("Uvarint = %d, want 300", got)
	}
	if r.Len() != 8 {
		t.Errorf("Len = %d before the float, want 8", r.Len())
	}
	if got := r.Float64(); got != 2.5 {
		t.Errorf("Float64 = %v, want 2.5", got)
	}
	if err := r.End(); err != nil {
		t.Errorf("End = %v, want nil", err)
	}
}

func TestReadsSignedCountsAndStrings(t *testing.T) {
	b := binary.AppendVarint(nil, -12345)
	b = binary.AppendUvarint(b, math.MaxInt64)
	b = binary.AppendUvarint(b, 3)
	b = append(b, "abc"...)
	r := NewReader(b, errBad)
	if got := r.Varint(); got != -12345 {
		t.Errorf("Varint = %d, want -12345", got)
	}
	if got := r.Int(); got != math.MaxInt64 {
		t.Errorf("Int = %d, want %d", got, int64(math.MaxInt64))
	}
	if got := r.String(3); got != "abc" {
		t.Errorf("String(3) = %q, want %q", got, "abc")
	}
	if err := r.End(); err != nil {
		t.Errorf("End = %v, want nil", err)
	}
}

func TestErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		b    []byte
		read func(r *Reader)
	}{
		{"empty byte", nil, func(r *Reader) { r.Byte() }},
		{"short float", []byte{1, 2, 3}, func(r *Reader) { r.Float64() }},
		{"truncated varint", []byte{0x80}, func(r *Reader) { r.Uvarint() }},
		{"non-minimal varint", []byte{0x81, 0x00}, func(r *Reader) { r.Uvarint() }},
		{"trailing bytes", []byte{1, 2}, func(r *Reader) { r.Byte() }},
		{"int out of range", binary.AppendUvarint(nil, math.MaxInt64+1), func(r *Reader) { r.Int() }},
		{"string longer than its limit", append(binary.AppendUvarint(nil, 4), "abcd"...), func(r *Reader) { r.String(3) }},
		{"string longer than the bytes", append(binary.AppendUvarint(nil, 5), "abcd"...), func(r *Reader) { r.String(10) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := NewReader(tc.b, errBad)
			tc.read(&r)
			if err := r.End(); !errors.Is(err, errBad) {
				t.Errorf("End = %v, want an error wrapping %v", err, errBad)
			}
		})
	}
}

func TestFirstErrorSticks(t *testing.T) {
	r := NewReader([]byte{0x81, 0x00, 5}, errBad)
	if r.Uvarint() != 0 || r.Err() == nil {
		t.Fatalf("a non-minimal varint read without error")
	}
	first := r.Err()
	if got := r.Byte(); got != 0 {
		t.Errorf("Byte after an error = %d, want 0", got)
	}
	if r.Err() != first {
		t.Errorf("error changed from %v to %v", first, r.Err())
	}
	if r.Len() != 3 {
		t.Errorf("Len = %d after failed reads, want 3 (nothing consumed)", r.Len())
	}
}
