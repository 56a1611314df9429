package wire

import (
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/shardlimiter/shardlimiter/limit"
)

// Batches of checks: Get/ForwardRateLimitsRequest, the same on the wire
// (field 1, repeated RateLimitRequest). A run of encoded items is itself a
// valid request, so a client may send the concatenation of runs encoded
// apart (the PeerClient batcher does).

// SizeChecks is the size of AppendChecks' output, for a single allocation.
func SizeChecks(checks []limit.Check) int {
	n := 0
	for i := range checks {
		r := RequestOf(&checks[i])
		n += 1 + protowire.SizeBytes(r.size())
	}
	return n
}

// AppendChecks appends checks as the items of a request. If offs is not
// nil it must have room for len(checks)+1 entries: offs[i] receives where
// item i starts, offs[len(checks)] the end, so that item i is
// b[offs[i]:offs[i+1]]. It fails only for a string that is not UTF-8,
// which proto.Marshal refuses too.
func AppendChecks(b []byte, checks []limit.Check, offs []int) ([]byte, error) {
	for i := range checks {
		if offs != nil {
			offs[i] = len(b)
		}
		r := RequestOf(&checks[i])
		var err error
		if b, err = r.appendItem(b); err != nil {
			return nil, err
		}
	}
	if offs != nil {
		offs[len(checks)] = len(b)
	}
	return b, nil
}

// varints are r's varint fields, reqHits to reqCreatedAt, as protobuf-go
// writes them: enums are int32, sign-extended; a bool is 0 or 1.
func (r *Request) varints() [numReqVarints]uint64 {
	var chained uint64
	if r.Chained {
		chained = 1
	}
	return [numReqVarints]uint64{uint64(r.Hits), uint64(r.Limit), uint64(r.DurationMs), uint64(r.Algorithm),
		uint64(r.Burst), uint64(r.MinIntervalMs), uint64(r.WarmupMs), uint64(r.Behavior), chained, uint64(r.Calendar),
		uint64(r.CreatedAtMs)}
}

// setVarints is the inverse of varints, as proto.Unmarshal reads the
// fields: int64 fields take the 64 bits, enums the low 32, a bool is true
// when not 0.
func (r *Request) setVarints(v *[numReqVarints]uint64) {
	r.Hits, r.Limit, r.DurationMs, r.Algorithm = int64(v[0]), int64(v[1]), int64(v[2]), int32(v[3])
	r.Burst, r.MinIntervalMs, r.WarmupMs, r.Behavior = int64(v[4]), int64(v[5]), int64(v[6]), int32(v[7])
	r.Chained, r.Calendar, r.CreatedAtMs = v[8] != 0, int32(v[9]), int64(v[10])
}

// size is the size of r without its own tag and length.
func (r *Request) size() int {
	n := sizeString(r.Name) + sizeString(r.Key)
	for _, v := range r.varints() {
		n += sizeVarint(v)
	}
	return n
}

// appendItem appends r as one item of a request, tag and length included.
func (r *Request) appendItem(b []byte) ([]byte, error) {
	if !utf8.ValidString(r.Name) || !utf8.ValidString(r.Key) {
		return nil, errInvalidUTF8
	}
	b = protowire.AppendTag(b, fieldItems, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(r.size()))
	b, _ = appendString(b, reqName, r.Name)
	b, _ = appendString(b, reqKey, r.Key)
	for i, v := range r.varints() {
		b = appendVarint(b, reqHits+protowire.Number(i), v)
	}
	return b, nil
}

// Checks is a batch of checks as a server received it: the items that
// converted, handed to the node, and those that did not, answered with
// their error. Add and DecodeChecks reuse its memory.
type Checks struct {
	Checks []limit.Check // the items that converted, in batch order
	Failed []Failed      // the items that did not, by increasing Index
	// Internal accepts what only nodes send each other: the gubernator
	// algorithms, their behavior flags and created_at_ms (see
	// Request.Check). Set by the Peers server; a client's batch refuses
	// them.
	Internal bool

	// DecodeChecks' memory for the keys (keys.go): their bytes and where
	// each decoded check's key lies in them.
	keyBytes []byte
	keySpans []keySpan
}

// Failed is an item that did not convert (see Request.Check).
type Failed struct {
	Index     int             // position in the batch
	Algorithm limit.Algorithm // the item's, or UnknownAlgorithm: a metrics label
	Limit     int64           // the item's limit, echoed in its answer
	Err       error           // names the field at fault
}

// Len is the number of items in the batch.
func (c *Checks) Len() int { return len(c.Checks) + len(c.Failed) }

// Add converts r and appends it to the batch.
func (c *Checks) Add(r *Request) {
	check, err := r.check(c.Internal)
	if err != nil {
		c.Failed = append(c.Failed, Failed{Index: c.Len(), Algorithm: r.algorithmOf(c.Internal), Limit: r.Limit, Err: err})
		return
	}
	c.Checks = append(c.Checks, check)
}

// Reset empties the batch, keeping its memory but none of its strings.
func (c *Checks) Reset() {
	clear(c.Checks)
	clear(c.Failed)
	c.Checks, c.Failed = c.Checks[:0], c.Failed[:0]
	c.resetKeys()
}

// DecodeChecks decodes a request into dst, replacing its contents, and
// returns the number of items data holds (0 if its framing is malformed).
// A request of more than maxItems items fails with ErrTooMany before anything
// is allocated for them; any other error means data is not a valid
// request. Strings are copied: dst does not retain data. The keys of a
// batch share one allocation (keys.go), so a key kept past the batch keeps
// the batch's keys in memory with it: clone a key kept for long.
func DecodeChecks(data []byte, maxItems int, dst *Checks) (int, error) {
	dst.Reset()
	n, err := countItems(data)
	switch {
	case err != nil:
		return 0, err
	case n > maxItems:
		return n, ErrTooMany
	case cap(dst.Checks) < n:
		dst.Checks = make([]limit.Check, 0, n)
	}
	d := requestDecoder{keys: dst.keyBytes}
	defer dst.setKeys(&d)
	for len(data) > 0 {
		num, typ, k := consumeTag(data) // valid: countItems checked the framing
		data = data[k:]
		if num == fieldItems && typ == protowire.BytesType {
			v, m := protowire.ConsumeBytes(data)
			if err := d.item(v); err != nil {
				return n, err
			}
			converted := len(dst.Checks)
			if dst.Add(&d.req); len(dst.Checks) > converted {
				dst.keySpans = append(dst.keySpans, d.key)
			}
			k = m
		} else {
			k = protowire.ConsumeFieldValue(num, typ, data)
		}
		data = data[k:]
	}
	return n, nil
}

// CountChecks returns the number of items of a request without decoding
// them (a scan of its framing, no allocation), so that a server can refuse
// a batch before paying for it; an error means data is not a valid
// request.
func CountChecks(data []byte) (int, error) { return countItems(data) }

// countItems counts the items of a request and checks its framing.
func countItems(data []byte) (int, error) {
	n := 0
	for len(data) > 0 {
		num, typ, k := consumeTag(data)
		if k < 0 {
			return 0, malformed("request", k)
		}
		data = data[k:]
		if k = protowire.ConsumeFieldValue(num, typ, data); k < 0 {
			return 0, malformed("request", k)
		}
		if num == fieldItems && typ == protowire.BytesType {
			n++
		}
		data = data[k:]
	}
	return n, nil
}

// requestDecoder reads one item at a time into req. The item's key is not
// in req.Key but appended to keys, at key (see keys.go).
type requestDecoder struct {
	req   Request
	names stringCache // rule names repeat across a batch
	keys  []byte      // the keys of the items read so far
	key   keySpan     // where the current item's key is in keys
}

func (d *requestDecoder) item(b []byte) error {
	d.req = Request{}
	d.key = keySpan{}
	var varints [numReqVarints]uint64
	for len(b) > 0 {
		num, typ, n := consumeTag(b)
		if n < 0 {
			return malformed("request item", n)
		}
		b = b[n:]
		switch {
		case typ == protowire.BytesType && (num == reqName || num == reqKey):
			v, m := protowire.ConsumeBytes(b)
			if m < 0 {
				return malformed("request item", m)
			}
			var err error
			if num == reqName {
				d.req.Name, err = d.names.str(v)
			} else {
				err = d.addKey(v)
			}
			if err != nil {
				return err
			}
			n = m
		case typ == protowire.VarintType && num >= reqHits && num <= reqCreatedAt:
			varints[num-reqHits], n = protowire.ConsumeVarint(b)
			if n < 0 {
				return malformed("request item", n)
			}
		default:
			if n = protowire.ConsumeFieldValue(num, typ, b); n < 0 {
				return malformed("request item", n)
			}
		}
		b = b[n:]
	}
	d.req.setVarints(&varints)
	return nil
}
