package transport

import (
	"fmt"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/shardlimiter/shardlimiter/limit"
)

// Decoding of Get/ForwardRateLimitsResponse by our own clients, straight
// into []limit.Result.
//
// Why by hand: through pb, every item costs a message and a metadata map
// (built entry by entry by reflection) that are read once and dropped; that
// was most of the client's CPU per check. The decoder here accepts exactly
// what proto.Unmarshal accepts and reads the same values — last occurrence
// of a field wins, unknown fields and fields of the wrong wire type are
// skipped, strings must be UTF-8 — so any standard server can answer it.
// wire_test.go checks that against proto.Unmarshal + resultFromProto over
// random messages and a fuzz target.

// resultsReply is the reply type our clients pass to Invoke with the client
// codec: the codec decodes the response into it.
type resultsReply struct {
	// forward: the message is a ForwardRateLimitsResponse (field 2 is its
	// owner); else a GetRateLimitsResponse (field 2 is unknown).
	forward bool
	// max bounds the items: an answer with more is refused before anything
	// is allocated for them.
	max     int
	results []limit.Result // the items, in order; reused across decodes
	owner   string         // ForwardRateLimitsResponse.owner
}

// decode replaces r's results and owner with those of b. An item decided
// without error whose metadata names no owner gets the response's owner,
// as resultFromProto does.
func (r *resultsReply) decode(b []byte) error {
	clear(r.results)
	r.results, r.owner = r.results[:0], ""
	var d stringCache
	for len(b) > 0 {
		num, typ, n := consumeTag(b)
		if n < 0 {
			return wireError("answer", n)
		}
		b = b[n:]
		switch {
		case num == fieldItems && typ == protowire.BytesType:
			v, m := protowire.ConsumeBytes(b)
			if m < 0 {
				return wireError("answer", m)
			}
			if err := r.appendItem(v, &d); err != nil {
				return err
			}
			n = m
		case num == fieldOwner && typ == protowire.BytesType && r.forward:
			v, m := protowire.ConsumeBytes(b)
			if m < 0 {
				return wireError("answer", m)
			}
			var err error
			if r.owner, err = d.str(v); err != nil {
				return err
			}
			n = m
		default:
			if n = protowire.ConsumeFieldValue(num, typ, b); n < 0 {
				return wireError("answer", n)
			}
		}
		b = b[n:]
	}
	if r.owner != "" {
		for i := range r.results {
			if res := &r.results[i]; res.Owner == "" && res.Error == "" {
				res.Owner = r.owner
			}
		}
	}
	return nil
}

func (r *resultsReply) appendItem(b []byte, d *stringCache) error {
	if len(r.results) >= r.max {
		return fmt.Errorf("transport: answer has more than the %d items asked", r.max)
	}
	var f itemFields
	if err := f.decode(b, d); err != nil {
		return err
	}
	r.results = append(r.results, f.result())
	return nil
}

// itemFields are the fields of a RateLimitResponse a client reads.
type itemFields struct {
	status                               int32
	remaining, resetMs, retryMs, delayMs int64
	err, owner                           string
	reason                               limit.Reason // of metadata["reason"]; read only with err
}

// result is the Result of an item, as resultFromProto defines it.
func (f *itemFields) result() limit.Result {
	res := limit.Result{
		Decision: limit.Decision{
			Allowed:    f.status == 0 && f.err == "", // UNDER_LIMIT
			Remaining:  f.remaining,
			ResetAt:    msToNs(f.resetMs),
			RetryAfter: limit.Never,
			Delay:      durationMs(max(f.delayMs, 0)),
		},
		Error: f.err,
		Owner: f.owner,
	}
	if f.retryMs >= 0 {
		res.RetryAfter = durationMs(f.retryMs)
	}
	if res.Error != "" {
		res.Reason = f.reason
	}
	return res
}

// decode reads one RateLimitResponse. The metadata map is not built: only
// its "owner" and "reason" entries are read (the last of each, as a map
// would keep), the others are checked and skipped.
func (f *itemFields) decode(b []byte, d *stringCache) error {
	var reason []byte
	for len(b) > 0 {
		num, typ, n := consumeTag(b)
		if n < 0 {
			return wireError("answer item", n)
		}
		b = b[n:]
		if typ == protowire.VarintType && num >= respStatus && num <= respDelay {
			v, m := protowire.ConsumeVarint(b)
			if m < 0 {
				return wireError("answer item", m)
			}
			f.setVarint(num, v)
			b = b[m:]
			continue
		}
		if typ == protowire.BytesType && (num == respError || num == respMetadata) {
			v, m := protowire.ConsumeBytes(b)
			if m < 0 {
				return wireError("answer item", m)
			}
			var err error
			if num == respError {
				f.err, err = d.str(v)
			} else {
				reason, err = f.entry(v, reason, d)
			}
			if err != nil {
				return err
			}
			b = b[m:]
			continue
		}
		if n = protowire.ConsumeFieldValue(num, typ, b); n < 0 {
			return wireError("answer item", n)
		}
		b = b[n:]
	}
	f.reason = parseReasonBytes(reason)
	return nil
}

func (f *itemFields) setVarint(num protowire.Number, v uint64) {
	switch num {
	case respStatus:
		f.status = int32(v)
	case respRemaining:
		f.remaining = int64(v)
	case respResetTime:
		f.resetMs = int64(v)
	case respRetry:
		f.retryMs = int64(v)
	case respDelay:
		f.delayMs = int64(v)
	} // respLimit: the client knows its limit
}

// entry reads one metadata map entry; reason is the last reason seen.
func (f *itemFields) entry(b, reason []byte, d *stringCache) ([]byte, error) {
	k, v, err := decodeEntry(b)
	if err != nil {
		return nil, err
	}
	switch string(k) {
	case metaOwner:
		f.owner, err = d.str(v)
	case metaReason:
		reason = v
	}
	return reason, err
}
