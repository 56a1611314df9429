package snapshot

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/shardlimiter/shardlimiter/limit"
)

// sample returns n records of every algorithm, with keys and states of
// varied lengths (an empty state, a state past one varint byte).
func sample(n int) []limit.KeyState {
	var out []limit.KeyState
	for i := range n {
		for _, a := range limit.Algorithms() {
			out = append(out, limit.KeyState{
				Algorithm: a,
				Key:       fmt.Sprintf("rule-%d\x00account:%d", a, i),
				State:     bytes.Repeat([]byte{byte(i), byte(a)}, i*40%300),
			})
		}
	}
	return out
}

func encode(t *testing.T, writtenAt int64, recs []limit.KeyState) []byte {
	t.Helper()
	var buf bytes.Buffer
	w := NewWriter(&buf, writtenAt)
	for _, r := range recs {
		if err := w.Write(r); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func decodeAll(b []byte) ([]limit.KeyState, Info, error) {
	var got []limit.KeyState
	info, err := Decode(bytes.NewReader(b), int64(len(b)), func(ks limit.KeyState) error {
		ks.State = slices.Clone(ks.State)
		got = append(got, ks)
		return nil
	})
	return got, info, err
}

func TestRoundTrip(t *testing.T) {
	t.Parallel()
	for _, n := range []int{0, 1, 50} {
		recs := sample(n)
		b := encode(t, 1234567890, recs)
		got, info, err := decodeAll(b)
		if err != nil {
			t.Fatalf("%d records: Decode: %v", len(recs), err)
		}
		if info != (Info{WrittenAt: 1234567890, Records: uint64(len(recs))}) {
			t.Errorf("%d records: info %+v", len(recs), info)
		}
		if len(got) != len(recs) {
			t.Fatalf("decoded %d records, wrote %d", len(got), len(recs))
		}
		for i := range recs {
			if got[i].Algorithm != recs[i].Algorithm || got[i].Key != recs[i].Key || !bytes.Equal(got[i].State, recs[i].State) {
				t.Fatalf("record %d = %+v, want %+v", i, got[i], recs[i])
			}
		}
		if _, err := Verify(bytes.NewReader(b), -1); err != nil {
			t.Errorf("Verify without a size: %v", err)
		}
	}
}

// Every proper prefix of a snapshot is refused, as corrupt.
func TestTruncatedAtEveryOffsetRefused(t *testing.T) {
	t.Parallel()
	b := encode(t, 42, sample(6))
	for n := range len(b) {
		if _, err := Verify(bytes.NewReader(b[:n]), int64(n)); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("Verify(first %d of %d bytes) = %v, want ErrCorrupt", n, len(b), err)
		}
	}
	if _, err := Verify(bytes.NewReader(append(slices.Clone(b), 0)), -1); !errors.Is(err, ErrCorrupt) {
		t.Errorf("Verify(a byte appended) = %v, want ErrCorrupt", err)
	}
}

// A flipped bit anywhere is refused: in the header by its checks, in a
// length by the bounds or the checksum, elsewhere by the checksum.
func TestFlippedByteRefused(t *testing.T) {
	t.Parallel()
	b := encode(t, 42, sample(6))
	for i := range len(b) {
		for _, mask := range []byte{0x01, 0x80, 0xFF} {
			c := slices.Clone(b)
			c[i] ^= mask
			if _, err := Verify(bytes.NewReader(c), int64(len(c))); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("Verify(byte %d of %d ^ %#x) = %v, want ErrCorrupt", i, len(b), mask, err)
			}
		}
	}
}

// Not parallel: it measures the bytes allocated.
func TestGarbledLengthAllocatesNothingLarge(t *testing.T) {
	b := encode(t, 42, nil)[:headerSize]
	// A record claiming a 60 MiB key in a file of a few bytes.
	b = append(b, byte(limit.FixedWindow), 0x80, 0x80, 0x80, 0x1E)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err := Verify(bytes.NewReader(b), int64(len(b)))
	runtime.ReadMemStats(&after)
	if !errors.Is(err, ErrCorrupt) {
		t.Errorf("Verify = %v, want ErrCorrupt", err)
	}
	if n := after.TotalAlloc - before.TotalAlloc; n > 1<<20 {
		t.Errorf("Verify allocated %d bytes", n)
	}
}

func TestWriteRefusesOutOfRangeRecord(t *testing.T) {
	t.Parallel()
	w := NewWriter(&bytes.Buffer{}, 0)
	if err := w.Write(limit.KeyState{Algorithm: 0x80, Key: "k"}); err == nil {
		t.Fatal("Write(algorithm 0x80) = nil, want an error")
	}
	if err := w.Close(); err == nil {
		t.Error("Close after a failed Write = nil, want the error")
	}
}

func TestFileWriteLoad(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	recs := sample(20)
	fill := func(recs []limit.KeyState) func(*Writer) error {
		return func(w *Writer) error {
			for _, r := range recs {
				if err := w.Write(r); err != nil {
					return err
				}
			}
			return nil
		}
	}
	if _, err := Load(dir, "node/a", nil); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("Load before any write = %v, want ErrNotExist", err)
	}
	info, err := Write(dir, "node/a", 7, fill(recs))
	if err != nil || info.Records != uint64(len(recs)) {
		t.Fatalf("Write = %+v, %v", info, err)
	}
	// A failing fill keeps the old file and leaves no temporary file.
	boom := errors.New("boom")
	if _, err := Write(dir, "node/a", 8, func(w *Writer) error { w.Write(recs[0]); return boom }); !errors.Is(err, boom) {
		t.Fatalf("Write(failing fill) = %v, want boom", err)
	}
	n := 0
	info, err = Load(dir, "node/a", func(limit.KeyState) error { n++; return nil })
	if err != nil || info.WrittenAt != 7 || n != len(recs) {
		t.Fatalf("Load = %+v, %v with %d records, want the first write's %d", info, err, n, len(recs))
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 || entries[0].Name() != "node_a.snapshot" {
		t.Errorf("dir holds %v, want node_a.snapshot alone", entries)
	}
	// Another node's file beside it is its own.
	if _, err := Write(dir, "node-b", 9, fill(recs[:3])); err != nil {
		t.Fatal(err)
	}
	if info, _ := Load(dir, "node/a", nil); info.Records != uint64(len(recs)) {
		t.Errorf("node/a's snapshot has %d records after node-b wrote, want %d", info.Records, len(recs))
	}
}

// A damaged file reaches the callback not at all.
func TestLoadDamagedCallsNothing(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if _, err := Write(dir, "n", 1, func(w *Writer) error {
		for _, r := range sample(30) {
			w.Write(r)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	path := Path(dir, "n")
	good, _ := os.ReadFile(path)
	for name, b := range map[string][]byte{
		"truncated": good[:len(good)*2/3],
		"garbled":   append(append(slices.Clone(good[:len(good)-40]), "garbage!"...), good[len(good)-32:]...),
		"empty":     nil,
	} {
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
		called := 0
		_, err := Load(dir, "n", func(limit.KeyState) error { called++; return nil })
		if !errors.Is(err, ErrCorrupt) || called != 0 {
			t.Errorf("%s: Load = %v after %d records handed out, want ErrCorrupt after none", name, err, called)
		}
	}
}

func TestRemoveTemp(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, name := range []string{"a.snapshot.tmp-1", "a.snapshot.tmp-2", "b.snapshot.tmp-1", "a.snapshot"} {
		os.WriteFile(filepath.Join(dir, name), nil, 0o600)
	}
	if n := RemoveTemp(dir, "a"); n != 2 {
		t.Errorf("RemoveTemp = %d, want 2", n)
	}
	entries, _ := os.ReadDir(dir)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if got := strings.Join(names, " "); got != "a.snapshot b.snapshot.tmp-1" {
		t.Errorf("left %q", got)
	}
}
