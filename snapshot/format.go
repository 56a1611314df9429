// Package snapshot implements the file a node keeps its key states in, so
// that counts survive a stop of every node: a checksummed stream of
// limit.KeyState records, written atomically and refused whole when it is
// damaged.
//
// # Format
//
// All integers are big-endian; lengths are unsigned varints.
//
//	header   magic "SHLMSNAP" (8 bytes), version uint16 (1), flags uint16 (0),
//	         written-at Unix ns int64
//	records  each: algorithm byte (< 0x80), key length, key, state length, state
//	trailer  0xFF, record count uint64, CRC-32C (Castagnoli) uint32 of every
//	         byte before it, header included
//
// The states are the per-key encodings of bucket/ and window/ (the ones
// handoff and replication move), so a snapshot needs no rules to be read,
// and merging it is the same merge a handoff does.
//
// A reader trusts nothing before the trailer: Decode hands out records as
// it reads them, so a caller that must refuse a damaged file whole checks it
// with Verify first (Load does both, on one open file).
//
// # Concurrency
//
// A Writer and a Decode call are used by one goroutine. Write (file.go)
// may run concurrently for different files.
package snapshot

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"hash/crc32"
	"io"

	"github.com/shardlimiter/shardlimiter/limit"
)

// Version is the format version this package writes and reads.
const Version = 1

const (
	magic      = "SHLMSNAP"
	headerSize = len(magic) + 2 + 2 + 8
	endTag     = 0xFF
	// maxField bounds a key or state length: a garbled length is refused
	// before anything that large is allocated.
	maxField = 64 << 20
)

// ErrCorrupt is wrapped by every error about a file's content (as opposed
// to an error reading it).
var ErrCorrupt = errors.New("snapshot: corrupt")

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Info describes a snapshot file.
type Info struct {
	WrittenAt int64 // Unix ns, from the header
	Records   uint64
}

// Writer streams records to an io.Writer, buffered, with the running
// checksum. Close writes the trailer; nothing is complete before it.
type Writer struct {
	dst io.Writer
	crc hash.Hash32
	bw  *bufio.Writer // to dst and crc
	n   uint64
	buf [binary.MaxVarintLen64]byte
	err error
}

// NewWriter writes the header to w and returns a Writer of records.
func NewWriter(w io.Writer, writtenAt int64) *Writer {
	sw := &Writer{dst: w, crc: crc32.New(castagnoli)}
	sw.bw = bufio.NewWriterSize(io.MultiWriter(w, sw.crc), 256<<10)
	var h [headerSize]byte
	copy(h[:], magic)
	binary.BigEndian.PutUint16(h[8:], Version)
	binary.BigEndian.PutUint64(h[12:], uint64(writtenAt))
	_, sw.err = sw.bw.Write(h[:])
	return sw
}

// Write appends one record. The first error sticks: Write and Close
// return it from then on.
func (w *Writer) Write(ks limit.KeyState) error {
	if w.err != nil {
		return w.err
	}
	if ks.Algorithm >= 0x80 || len(ks.Key) > maxField || len(ks.State) > maxField {
		w.err = fmt.Errorf("snapshot: record of algorithm %d, key %d bytes, state %d bytes: out of range", ks.Algorithm, len(ks.Key), len(ks.State))
		return w.err
	}
	// bufio.Writer keeps its first error and returns it from every later
	// call, so checking the last one suffices.
	w.bw.WriteByte(byte(ks.Algorithm))
	w.bw.Write(binary.AppendUvarint(w.buf[:0], uint64(len(ks.Key))))
	w.bw.WriteString(ks.Key)
	w.bw.Write(binary.AppendUvarint(w.buf[:0], uint64(len(ks.State))))
	_, w.err = w.bw.Write(ks.State)
	w.n++
	return w.err
}

// Records returns how many records were written.
func (w *Writer) Records() uint64 { return w.n }

// Close writes the trailer and flushes; it does not close the underlying
// writer. The Writer is unusable afterwards.
func (w *Writer) Close() error {
	if w.err != nil {
		return w.err
	}
	var t [1 + 8]byte
	t[0] = endTag
	binary.BigEndian.PutUint64(t[1:], w.n)
	w.bw.Write(t[:])
	if w.err = w.bw.Flush(); w.err != nil {
		return w.err
	}
	// The checksum covers every byte flushed so far, and goes to dst alone.
	var sum [4]byte
	binary.BigEndian.PutUint32(sum[:], w.crc.Sum32())
	if _, w.err = w.dst.Write(sum[:]); w.err != nil {
		return w.err
	}
	w.err = errClosed
	return nil
}

var errClosed = errors.New("snapshot: writer closed")

// Verify reads a whole snapshot from r and checks its structure and
// checksum, handing out nothing. size is the file's length (-1 if
// unknown): a length field past it is refused at once.
func Verify(r io.Reader, size int64) (Info, error) {
	return Decode(r, size, nil)
}

// Decode reads a snapshot from r and calls fn (when not nil) with each
// record as it is read; ks.State is valid only during the call. It returns
// an error wrapping ErrCorrupt when the content is damaged, which may be
// discovered only after fn has seen every record: see Load for a caller
// that must refuse a damaged file whole. An error of fn stops the decoding
// and is returned as is.
func Decode(r io.Reader, size int64, fn func(ks limit.KeyState) error) (Info, error) {
	d := decoder{br: bufio.NewReaderSize(r, 64<<10), crc: crc32.New(castagnoli), left: size}
	var info Info
	var h [headerSize]byte
	if err := d.full(h[:]); err != nil {
		return info, err
	}
	if string(h[:8]) != magic {
		return info, fmt.Errorf("%w: not a snapshot file (bad magic)", ErrCorrupt)
	}
	if v := binary.BigEndian.Uint16(h[8:]); v != Version {
		return info, fmt.Errorf("%w: format version %d, this build reads %d", ErrCorrupt, v, Version)
	}
	info.WrittenAt = int64(binary.BigEndian.Uint64(h[12:]))
	var key, state []byte
	for {
		tag, err := d.byte()
		if err != nil {
			return info, err
		}
		if tag == endTag {
			break
		}
		if tag >= 0x80 {
			return info, fmt.Errorf("%w: bad record tag %#x after %d records", ErrCorrupt, tag, info.Records)
		}
		if key, err = d.field(key); err != nil {
			return info, err
		}
		if state, err = d.field(state); err != nil {
			return info, err
		}
		info.Records++
		if fn != nil {
			if err := fn(limit.KeyState{Algorithm: limit.Algorithm(tag), Key: string(key), State: state}); err != nil {
				return info, err
			}
		}
	}
	var t [8]byte
	if err := d.full(t[:]); err != nil {
		return info, err
	}
	if n := binary.BigEndian.Uint64(t[:]); n != info.Records {
		return info, fmt.Errorf("%w: trailer counts %d records, read %d", ErrCorrupt, n, info.Records)
	}
	want := d.crc.Sum32()
	var sum [4]byte
	if _, err := io.ReadFull(d.br, sum[:]); err != nil {
		return info, truncated(err)
	}
	if got := binary.BigEndian.Uint32(sum[:]); got != want {
		return info, fmt.Errorf("%w: checksum %08x, content sums to %08x", ErrCorrupt, got, want)
	}
	if _, err := d.br.ReadByte(); err != io.EOF {
		return info, fmt.Errorf("%w: bytes after the checksum", ErrCorrupt)
	}
	return info, nil
}

// decoder reads through a running checksum.
type decoder struct {
	br   *bufio.Reader
	crc  hash.Hash32
	left int64 // bytes of the file not yet read; < 0: unknown
}

func (d *decoder) full(p []byte) error {
	if _, err := io.ReadFull(d.br, p); err != nil {
		return truncated(err)
	}
	d.crc.Write(p)
	d.left -= int64(len(p))
	return nil
}

func (d *decoder) byte() (byte, error) {
	var b [1]byte
	err := d.full(b[:])
	return b[0], err
}

// field reads a length-prefixed field into buf's storage.
func (d *decoder) field(buf []byte) ([]byte, error) {
	var lb [binary.MaxVarintLen64]byte
	i := 0
	for ; ; i++ {
		if i == len(lb) {
			return nil, fmt.Errorf("%w: bad length", ErrCorrupt)
		}
		b, err := d.br.ReadByte()
		if err != nil {
			return nil, truncated(err)
		}
		lb[i] = b
		if b < 0x80 {
			break
		}
	}
	d.crc.Write(lb[:i+1])
	d.left -= int64(i + 1)
	n, k := binary.Uvarint(lb[:i+1])
	if k <= 0 || n > maxField || (d.left >= 0 && int64(n) > d.left) {
		return nil, fmt.Errorf("%w: field length %d out of range", ErrCorrupt, n)
	}
	if uint64(cap(buf)) < n {
		buf = make([]byte, n)
	}
	buf = buf[:n]
	return buf, d.full(buf)
}

func truncated(err error) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return fmt.Errorf("%w: truncated", ErrCorrupt)
	}
	return err
}
