package transport

import (
	"bytes"
	"testing"

	"google.golang.org/grpc/mem"
)

func TestDirtyPoolSizes(t *testing.T) {
	for _, n := range []int{0, 1, 255, 256, 257, 40_000, 1 << 22, 1<<22 + 1} {
		b := bufs.Get(n)
		if len(*b) != n {
			t.Fatalf("Get(%d): length %d", n, len(*b))
		}
		if want := max(256, 1<<tierBits(n)); n <= 1<<maxTier && cap(*b) != want {
			t.Fatalf("Get(%d): capacity %d, want %d", n, cap(*b), want)
		}
		bufs.Put(b)
	}
}

func tierBits(n int) int {
	k := 0
	for 1<<k < n {
		k++
	}
	return k
}

// rawMessage decodes by keeping a copy of what it is given.
type rawMessage struct{ got []byte }

func (m *rawMessage) Decode(data []byte) error {
	m.got = bytes.Clone(data)
	return nil
}

// A message in several buffers is decoded from their concatenation, in one
// buffer or several, and a pooled buffer's earlier contents do not leak
// into a shorter message.
func TestUnmarshalJoinsBuffers(t *testing.T) {
	long := bytes.Repeat([]byte("x"), 3000)
	b := bufs.Get(len(long))
	copy(*b, long)
	bufs.Put(b)
	parts := []string{"ab", "", "cdef", "g"}
	var data mem.BufferSlice
	for _, p := range parts {
		data = append(data, mem.SliceBuffer(p))
	}
	var m rawMessage
	if err := Codec.Unmarshal(data, &m); err != nil {
		t.Fatal(err)
	}
	if string(m.got) != "abcdefg" {
		t.Fatalf("decoded %q, want %q", m.got, "abcdefg")
	}
	if err := Codec.Unmarshal(mem.BufferSlice{mem.SliceBuffer("one")}, &m); err != nil || string(m.got) != "one" {
		t.Fatalf("one buffer: decoded %q, %v", m.got, err)
	}
}
