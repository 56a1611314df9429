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
func AppendResults(b []byte, results []limit.Result, limits []int64, owner string) ([]byte, error) {
	var e resultEncoder
	for i := range results {
		r := ResponseOf(&results[i], limits[i], owner)
		b = protowire.AppendTag(b, fieldItems, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(r.size()))
		var err error
		if b, err = e.appendItem(b, &r); err != nil {
			return nil, err
		}
	}
	return appendString(b, fieldOwner, owner)
}

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
