package transport

import (
	"unicode/utf8"

	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/shardlimiter/shardlimiter/limit"
	"github.com/shardlimiter/shardlimiter/transport/pb"
)

// Encoding of Get/ForwardRateLimitsRequest by our own clients, straight
// from []limit.Check: no pb message per item. Both requests are the same
// on the wire (field 1, repeated RateLimitRequest), and a run of encoded
// items is itself a valid request, so a PeerClient batch is the
// concatenation of its callers' runs. The bytes are those of
// proto.MarshalOptions{Deterministic: true} applied to checkToProto's
// messages (wire_test.go checks it).

// RateLimitRequest field numbers.
const (
	reqName protowire.Number = iota + 1
	reqKey
	reqHits
	reqLimit
	reqDuration
	reqAlgorithm
	reqBurst
	reqMinInterval
	reqWarmup
	reqBehavior
)

// checksRequest is a request of checks, encoded by the client codec when
// gRPC sends it (a Client call).
type checksRequest struct {
	checks []limit.Check
}

// encodedRequest is a request message already in wire form: the
// concatenation of parts. The client codec sends the parts as they are.
type encodedRequest struct {
	parts [][]byte
}

// buffers returns the parts for gRPC without copying them; they are not
// pooled, so the memory stays valid for as long as gRPC holds it.
func (r *encodedRequest) buffers() mem.BufferSlice {
	out := make(mem.BufferSlice, 0, len(r.parts))
	for _, p := range r.parts {
		if len(p) > 0 {
			out = append(out, mem.SliceBuffer(p))
		}
	}
	return out
}

// appendChecks appends checks as repeated field 1 and returns, in offs
// (when not nil), where each item starts followed by the end; offs must
// have room for len(checks)+1 entries.
func appendChecks(b []byte, checks []limit.Check, offs []int) ([]byte, error) {
	for i := range checks {
		if offs != nil {
			offs[i] = len(b)
		}
		var err error
		if b, err = appendCheck(b, &checks[i]); err != nil {
			return nil, err
		}
	}
	if offs != nil {
		offs[len(checks)] = len(b)
	}
	return b, nil
}

// sizeChecks is the encoded size of checks, for a single allocation.
func sizeChecks(checks []limit.Check) int {
	n := 0
	for i := range checks {
		v := checkVarints(&checks[i])
		n += 1 + protowire.SizeBytes(sizeCheck(&checks[i], &v))
	}
	return n
}

// checkVarints are the varint fields of c's RateLimitRequest (hits to
// behavior), converted as checkToProto does; enums are int32 on the wire,
// sign-extended as protobuf-go does.
func checkVarints(c *limit.Check) [8]uint64 {
	return [8]uint64{
		uint64(c.Hits),
		uint64(c.Rule.Limit),
		uint64(ceilMs(int64(c.Rule.Period))),
		uint64(pb.Algorithm(c.Rule.Algorithm)),
		uint64(c.Rule.Burst),
		uint64(ceilMs(int64(c.Rule.MinInterval))),
		uint64(ceilMs(int64(c.Rule.Warmup))),
		uint64(pb.Behavior(c.Rule.Behavior)),
	}
}

func sizeCheck(c *limit.Check, v *[8]uint64) int {
	n := sizeString(c.Name) + sizeString(c.Key)
	for _, x := range v {
		n += sizeVarint(x)
	}
	return n
}

// appendCheck appends one item, tag and length included.
func appendCheck(b []byte, c *limit.Check) ([]byte, error) {
	if !utf8.ValidString(c.Name) || !utf8.ValidString(c.Key) {
		return nil, errInvalidUTF8 // as proto.Marshal would refuse it
	}
	v := checkVarints(c)
	b = protowire.AppendTag(b, fieldItems, protowire.BytesType) // field 1, "requests"
	b = protowire.AppendVarint(b, uint64(sizeCheck(c, &v)))
	b, _ = appendString(b, reqName, c.Name)
	b, _ = appendString(b, reqKey, c.Key)
	for i, x := range v {
		b = appendVarint(b, reqHits+protowire.Number(i), x)
	}
	return b, nil
}
