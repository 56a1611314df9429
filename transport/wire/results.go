package wire

import (
	"fmt"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/shardlimiter/shardlimiter/limit"
)

// Batches of results: Get/ForwardRateLimitsResponse (field 1, repeated
// RateLimitResponse; the latter also has field 2, the owner that decided
// the batch).

// SizeResults is the size of AppendResults' output for the same arguments.
func SizeResults(results []limit.Result, limits []int64, owner string) int {
	n := sizeString(owner)
	for i := range results {
		r := ResponseOf(&results[i], limits[i], owner)
		n += 1 + protowire.SizeBytes(r.size())
	}
	return n
}

// AppendResults appends the answer to a batch: results[i] answers item i,
// and limits[i] is its rule's limit, echoed (limits must be as long as
// results). For a ForwardRateLimitsResponse owner names the node that
// decided the batch: it is written once and left out of the items it
// decided. With owner "" the bytes are also a GetRateLimitsResponse. It
// fails only for a string that is not UTF-8, which proto.Marshal refuses
// too.
//
// Each item is encoded once: one byte is kept for its length, which is
// written after the item; an item of 128 bytes or more (a long error or
// owner) is moved up to make room for a longer length. The output is that
// of proto.Marshal either way (the shortest varint).
func AppendResults(b []byte, results []limit.Result, limits []int64, owner string) ([]byte, error) {
	var e resultEncoder
	for i := range results {
		r := ResponseOf(&results[i], limits[i], owner)
		b = protowire.AppendTag(b, fieldItems, protowire.BytesType)
		at := len(b)
		b = append(b, 0) // the length, if it fits one byte
		var err error
		if b, err = e.appendItem(b, &r); err != nil {
			return nil, err
		}
		b = patchLength(b, at)
	}
	return appendString(b, fieldOwner, owner)
}

// patchLength writes, at b[at], the varint length of b[at+1:], the item
// appended after the byte kept for it, moving the item up when its length
// needs more than that byte.
func patchLength(b []byte, at int) []byte {
	n := len(b) - at - 1
	if n < 0x80 {
		b[at] = byte(n)
		return b
	}
	extra := protowire.SizeVarint(uint64(n)) - 1
	b = append(b, make([]byte, extra)...)
	copy(b[at+1+extra:], b[at+1:at+1+n])
	protowire.AppendVarint(b[at:at], uint64(n))
	return b
}

// BoundResults is at least the size of AppendResults' output for the same
// arguments, found without encoding: a buffer of its size holds the
// answer. It looks at each item's strings only.
func BoundResults(results []limit.Result, owner string) int {
	n := sizeString(owner)
	for i := range results {
		r := &results[i]
		n += maxItemFixed + len(r.Error) + len(r.Owner)
	}
	return n
}

// maxItemFixed bounds an item's bytes other than its error's and owner's
// bytes: its tag and length (1 + 3: an item is far below 2 MiB, the
// request's bound), six varint fields (11 each at most), the error's tag
// and length (1 + 3), the owner entry's framing (tag 1, length 3, key
// field 2 + 5 bytes of "owner", value's tag and length 1 + 3) and the
// reason entry (tag 1, length 1, key field 2 + 6, value field 2 + the
// longest reason's name).
const maxItemFixed = 4 + 6*11 + 4 + (1 + 3 + 2 + len(MetaOwner) + 1 + 3) + (1 + 1 + 2 + len(MetaReason) + 2 + maxReasonLen)

// maxReasonLen is the length of the longest reason's name,
// "invalid_argument" (TestBoundResults checks it against limit.Reasons).
const maxReasonLen = 16

// varints are r's varint fields, respStatus to respDelay, as protobuf-go
// writes them.
func (r *Response) varints() [6]uint64 {
	return [6]uint64{uint64(r.Status), uint64(r.Limit), uint64(r.Remaining),
		uint64(r.ResetTimeMs), uint64(r.RetryAfterMs), uint64(r.DelayMs)}
}

// setVarints is the inverse of varints, as proto.Unmarshal reads the
// fields.
func (r *Response) setVarints(v *[6]uint64) {
	r.Status, r.Limit, r.Remaining = int32(v[0]), int64(v[1]), int64(v[2])
	r.ResetTimeMs, r.RetryAfterMs, r.DelayMs = int64(v[3]), int64(v[4]), int64(v[5])
}

// size is the size of r without its own tag and length.
func (r *Response) size() int {
	n := sizeString(r.Error)
	for _, v := range r.varints() {
		n += sizeVarint(v)
	}
	if r.Owner != "" {
		n += 1 + protowire.SizeBytes(sizeEntry(MetaOwner, r.Owner))
	}
	if r.Reason != limit.OK {
		n += 1 + protowire.SizeBytes(sizeEntry(MetaReason, r.Reason.String()))
	}
	return n
}

// resultEncoder encodes the items of one answer. It keeps the last owner
// entry encoded: the items of a batch mostly share their owner, whose
// entry is then one copy.
type resultEncoder struct {
	owner string // value of entry
	entry []byte // {"owner": owner} encoded: tag, length, key, value; nil: none yet
}

func (e *resultEncoder) appendItem(b []byte, r *Response) ([]byte, error) {
	for i, v := range r.varints() {
		b = appendVarint(b, respStatus+protowire.Number(i), v)
	}
	b, err := appendString(b, respError, r.Error)
	if err != nil {
		return nil, err
	}
	// Map entries in key order, as deterministic proto writes them.
	if r.Owner != "" {
		if e.entry == nil || r.Owner != e.owner {
			if !utf8.ValidString(r.Owner) {
				return nil, errInvalidUTF8
			}
			e.owner, e.entry = r.Owner, appendEntry(e.entry[:0], MetaOwner, r.Owner)
		}
		b = append(b, e.entry...)
	}
	if r.Reason != limit.OK {
		b = appendEntry(b, MetaReason, r.Reason.String())
	}
	return b, nil
}

// DecodeResults decodes an answer into dst's memory and returns the
// results, in order. forward says which message data is: a
// ForwardRateLimitsResponse, whose owner is the Owner of every decided
// item that names none, or a GetRateLimitsResponse, whose field 2 is
// unknown. An answer of more than maxItems items fails before they are decoded.
// Strings are copied: the results do not retain data. On error the
// returned slice holds the items decoded so far, for the memory's reuse.
func DecodeResults(data []byte, forward bool, maxItems int, dst []limit.Result) ([]limit.Result, error) {
	clear(dst)
	dst = dst[:0]
	owner := ""
	var d stringCache
	for len(data) > 0 {
		num, typ, n := consumeTag(data)
		if n < 0 {
			return dst, malformed("answer", n)
		}
		data = data[n:]
		switch {
		case num == fieldItems && typ == protowire.BytesType:
			v, m := protowire.ConsumeBytes(data)
			if m < 0 {
				return dst, malformed("answer", m)
			}
			if len(dst) >= maxItems {
				return dst, fmt.Errorf("transport: answer has more than the %d items asked", maxItems)
			}
			var r Response
			if err := r.decode(v, &d); err != nil {
				return dst, err
			}
			dst = append(dst, r.Result(""))
			n = m
		case num == fieldOwner && typ == protowire.BytesType && forward:
			v, m := protowire.ConsumeBytes(data)
			if m < 0 {
				return dst, malformed("answer", m)
			}
			var err error
			if owner, err = d.str(v); err != nil {
				return dst, err
			}
			n = m
		default:
			if n = protowire.ConsumeFieldValue(num, typ, data); n < 0 {
				return dst, malformed("answer", n)
			}
		}
		data = data[n:]
	}
	if owner != "" { // it may come after the items
		for i := range dst {
			if res := &dst[i]; res.Owner == "" && res.Error == "" {
				res.Owner = owner
			}
		}
	}
	return dst, nil
}

// decode reads one RateLimitResponse into r, which must be zero. The
// metadata map is not built: only its "owner" and "reason" entries are
// read (the last of each, as a map would keep), the others are checked and
// skipped.
func (r *Response) decode(b []byte, d *stringCache) error {
	var varints [6]uint64
	for len(b) > 0 {
		num, typ, n := consumeTag(b)
		if n < 0 {
			return malformed("answer item", n)
		}
		b = b[n:]
		switch {
		case typ == protowire.VarintType && num >= respStatus && num <= respDelay:
			varints[num-respStatus], n = protowire.ConsumeVarint(b)
			if n < 0 {
				return malformed("answer item", n)
			}
		case typ == protowire.BytesType && (num == respError || num == respMetadata):
			v, m := protowire.ConsumeBytes(b)
			if m < 0 {
				return malformed("answer item", m)
			}
			var err error
			if num == respError {
				r.Error, err = d.str(v)
			} else {
				err = r.entry(v, d)
			}
			if err != nil {
				return err
			}
			n = m
		default:
			if n = protowire.ConsumeFieldValue(num, typ, b); n < 0 {
				return malformed("answer item", n)
			}
		}
		b = b[n:]
	}
	r.setVarints(&varints)
	return nil
}

// entry reads one metadata map entry.
func (r *Response) entry(b []byte, d *stringCache) error {
	k, v, err := decodeEntry(b)
	if err != nil {
		return err
	}
	switch string(k) {
	case MetaOwner:
		r.Owner, err = d.str(v)
	case MetaReason:
		r.Reason = parseReason(v)
	}
	return err
}
