package transport

import (
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/shardlimiter/shardlimiter/transport/pb"
)

// Decoding of Get/ForwardRateLimitsRequest on the server, straight into the
// checks handed to the Checker.
//
// Why by hand: proto.Unmarshal builds a message per item that is converted
// once and dropped; that was about 40% of the server's CPU per call after
// the responses were hand-encoded. Each item here is read into one
// RateLimitRequest on the stack and converted by checkFromProto, exactly
// as before, so conversion errors stay per item and identical. What the
// decoder accepts is what proto.Unmarshal accepts (see wiredecode.go);
// wire_test.go compares the two over random and fuzzed input.

// malformedError is a request that is not valid proto: the whole call is
// answered InvalidArgument (see Code).
type malformedError struct{ err error }

func (e *malformedError) Error() string { return e.err.Error() }
func (e *malformedError) Unwrap() error { return e.err }

// checkBatch is the request type of the services: the server codec decodes
// a Get/ForwardRateLimitsRequest into it.
type checkBatch struct {
	max int      // items allowed; more fails the call before allocating them
	n   int      // items in the request
	sc  *scratch // the items, converted; pooled, released by the handler
	err error    // the request is malformed or too large: answer this
}

// decode fills b from the wire. It never fails: a bad request is recorded
// in b.err, for the handler to answer with InvalidArgument (gRPC would turn
// a codec error into Internal).
func (b *checkBatch) decode(data []byte) {
	n, err := countItems(data)
	switch {
	case err != nil:
		b.err = &malformedError{err}
		return
	case n > b.max:
		b.n, b.err = n, &batchError{n: n, max: b.max}
		return
	}
	b.n, b.sc = n, getScratch()
	b.sc.checks = growChecks(b.sc.checks, n)
	var d requestDecoder
	i := 0
	for len(data) > 0 {
		num, typ, k := consumeTag(data) // valid: countItems checked
		data = data[k:]
		if num == fieldItems && typ == protowire.BytesType {
			v, m := protowire.ConsumeBytes(data)
			if err := d.item(v); err != nil {
				b.err = &malformedError{err}
				return
			}
			b.sc.add(i, &d.req)
			i++
			k = m
		} else {
			k = protowire.ConsumeFieldValue(num, typ, data)
		}
		data = data[k:]
	}
}

// countItems counts the items of a request and checks its framing.
func countItems(data []byte) (int, error) {
	n := 0
	for len(data) > 0 {
		num, typ, k := consumeTag(data)
		if k < 0 {
			return 0, wireError("request", k)
		}
		data = data[k:]
		if k = protowire.ConsumeFieldValue(num, typ, data); k < 0 {
			return 0, wireError("request", k)
		}
		if num == fieldItems && typ == protowire.BytesType {
			n++
		}
		data = data[k:]
	}
	return n, nil
}

// release gives the converted items back to the pool.
func (b *checkBatch) release() {
	if b.sc != nil {
		b.sc.release()
		b.sc = nil
	}
}

func growChecks[S ~[]E, E any](s S, n int) S {
	if cap(s) < n {
		return make(S, 0, n)
	}
	return s[:0]
}

// requestDecoder reads one item at a time into req, reused.
type requestDecoder struct {
	req   pb.RateLimitRequest
	names stringCache // rule names repeat across a batch
}

func (d *requestDecoder) item(b []byte) error {
	d.req = pb.RateLimitRequest{}
	r := &d.req
	for len(b) > 0 {
		num, typ, n := consumeTag(b)
		if n < 0 {
			return wireError("request item", n)
		}
		b = b[n:]
		switch {
		case typ == protowire.BytesType && (num == reqName || num == reqKey):
			v, m := protowire.ConsumeBytes(b)
			if m < 0 {
				return wireError("request item", m)
			}
			if err := d.setString(num, v); err != nil {
				return err
			}
			n = m
		case typ == protowire.VarintType && num >= reqHits && num <= reqBehavior:
			v, m := protowire.ConsumeVarint(b)
			if m < 0 {
				return wireError("request item", m)
			}
			setRequestVarint(r, num, v)
			n = m
		default:
			if n = protowire.ConsumeFieldValue(num, typ, b); n < 0 {
				return wireError("request item", n)
			}
		}
		b = b[n:]
	}
	return nil
}

func (d *requestDecoder) setString(num protowire.Number, v []byte) error {
	if num == reqName {
		s, err := d.names.str(v)
		d.req.Name = s
		return err
	}
	var keys stringCache // keys rarely repeat: no cache across items
	s, err := keys.str(v)
	d.req.UniqueKey = s
	return err
}

// setRequestVarint sets a varint field as proto.Unmarshal would: int64
// fields take the 64 bits, enums the low 32.
func setRequestVarint(r *pb.RateLimitRequest, num protowire.Number, v uint64) {
	switch num {
	case reqHits:
		r.Hits = int64(v)
	case reqLimit:
		r.Limit = int64(v)
	case reqDuration:
		r.DurationMs = int64(v)
	case reqAlgorithm:
		r.Algorithm = pb.Algorithm(int32(v))
	case reqBurst:
		r.Burst = int64(v)
	case reqMinInterval:
		r.MinIntervalMs = int64(v)
	case reqWarmup:
		r.WarmupMs = int64(v)
	case reqBehavior:
		r.Behavior = pb.Behavior(int32(v))
	}
}
