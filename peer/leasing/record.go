package leasing

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/shardlimiter/shardlimiter/internal/statebytes"
	"github.com/shardlimiter/shardlimiter/limit"
)

// Record is one outstanding grant in its owner's book, as it travels with
// the key's state (a limit.KeyState of limit.LeaseBook): what a release of
// the grant is credited against, wherever the key is decided when the
// release arrives.
type Record struct {
	ID      uint64     // the grant's id, as the lessee names it in its release
	Lessee  string     // who holds it
	Rule    limit.Rule // the grant's rule: a leasable one (Algorithm, Limit, Period, Burst)
	Hits    int64      // granted
	Expires int64      // Unix ns: the record may be dropped from then on
	End     int64      // the end of the grant's window (Unix ns); 0 for none
}

// Bounds on an encoded book: a garbled or hostile state is refused before
// anything that large is allocated.
const (
	recordsVersion = 1
	// MaxRecords bounds the records of one key's book.
	MaxRecords = 1 << 12
	// maxLessee bounds a lessee's name.
	maxLessee = 1 << 10
)

// errRecords wraps every error about an encoded book.
var errRecords = errors.New("leasing: bad lease records")

// AppendRecords appends the encoding of recs to b: a version byte, the
// count, then per record its id, lessee, rule, hits, expiry and window end
// (unsigned varints, the instants signed).
func AppendRecords(b []byte, recs []Record) []byte {
	b = append(b, recordsVersion)
	b = binary.AppendUvarint(b, uint64(len(recs)))
	for _, r := range recs {
		b = binary.AppendUvarint(b, r.ID)
		b = binary.AppendUvarint(b, uint64(len(r.Lessee)))
		b = append(b, r.Lessee...)
		b = append(b, byte(r.Rule.Algorithm))
		b = binary.AppendUvarint(b, uint64(r.Rule.Limit))
		b = binary.AppendUvarint(b, uint64(r.Rule.Period))
		b = binary.AppendUvarint(b, uint64(r.Rule.Burst))
		b = binary.AppendUvarint(b, uint64(r.Hits))
		b = binary.AppendVarint(b, r.Expires)
		b = binary.AppendVarint(b, r.End)
	}
	return b
}

// DecodeRecords decodes a book encoded by AppendRecords. Every record's
// rule must be leasable and valid, and its hits at most the rule's
// capacity; anything else is an error and nothing is returned.
func DecodeRecords(b []byte) ([]Record, error) {
	d := statebytes.NewReader(b, errRecords)
	if v := d.Byte(); d.Err() == nil && v != recordsVersion {
		return nil, fmt.Errorf("%w: version %d", errRecords, v)
	}
	n := d.Uvarint()
	if d.Err() == nil && n > MaxRecords {
		return nil, fmt.Errorf("%w: %d records, at most %d", errRecords, n, MaxRecords)
	}
	var out []Record
	for i := uint64(0); i < n && d.Err() == nil; i++ {
		var r Record
		r.ID = d.Uvarint()
		r.Lessee = d.String(maxLessee)
		r.Rule.Algorithm = limit.Algorithm(d.Byte())
		r.Rule.Limit, r.Rule.Period, r.Rule.Burst = d.Int(), time.Duration(d.Int()), d.Int()
		r.Hits = d.Int()
		r.Expires, r.End = d.Varint(), d.Varint()
		if d.Err() != nil {
			break
		}
		if err := r.Rule.Validate(); err != nil || !Leasable(r.Rule) || r.ID == 0 || r.Hits <= 0 || r.Hits > r.Rule.Capacity() {
			return nil, fmt.Errorf("%w: record %d: not a grant of a leasable rule (%v)", errRecords, i, err)
		}
		out = append(out, r)
	}
	if err := d.End(); err != nil {
		return nil, err
	}
	return out, nil
}
