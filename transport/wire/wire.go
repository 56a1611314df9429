// Package wire implements the protobuf encoding of shardlimiter.v1's batches
// of checks and answers, straight from and into the limit vocabulary: no
// generated message per item. It is transport's codec, used by its servers
// and its clients alike:
//
//	              encode                              decode
//	checks   AppendChecks:  []limit.Check → bytes     DecodeChecks:  bytes → Checks
//	         (a client sends a request)               (a server receives it)
//	results  AppendResults: []limit.Result → bytes    DecodeResults: bytes → []limit.Result
//	         (a server answers)                       (a client reads the answer)
//
// Requests are Get- or ForwardRateLimitsRequest, the same on the wire;
// answers are Get- or ForwardRateLimitsResponse, which differ only in the
// latter's owner field. Between the bytes and the limit types sit [Request]
// and [Response], one item with its fields as they are on the wire
// (milliseconds, enum numbers, metadata entries). Their conversions,
// [RequestOf] and [Request.Check], [ResponseOf] and [Response.Result], hold
// every conversion rule; the HTTP/JSON API fills them from and into
// generated messages, so both APIs convert alike.
//
// Why by hand: protobuf-go builds a message per item and marshals the
// metadata map through reflection, entry by entry; that was most of the
// CPU per check of the server and of the clients. Here encoding is plain
// appends, and the {"owner": X} entry that almost every answer carries is
// encoded once per batch and copied.
//
// Compatibility: the encoders write exactly what
// proto.MarshalOptions{Deterministic: true} writes for the message the
// conversions describe (fields in number order, zero values omitted, map
// entries with both fields, keys sorted), and the decoders accept exactly
// what proto.Unmarshal accepts and read the same values (the last
// occurrence of a field wins, unknown fields and fields of the wrong wire
// type are skipped, strings must be UTF-8). The tests compare both with
// protobuf-go over random and fuzzed input. Error texts keep the
// "transport:" prefix: they reach clients in gRPC status messages.
//
// Concurrency: the functions are safe for concurrent use; a [Checks] value
// belongs to one goroutine at a time.
package wire

import (
	"errors"
	"fmt"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"
)

// Field numbers of shardlimiter.v1, from shardlimiter.proto.
const (
	fieldItems protowire.Number = 1 // Get/Forward…Request.requests, …Response.responses
	fieldOwner protowire.Number = 2 // ForwardRateLimitsResponse.owner
)

// RateLimitRequest.
const (
	reqName protowire.Number = iota + 1
	reqKey
	reqHits // first varint field; the others follow up to reqCalendar
	reqLimit
	reqDuration
	reqAlgorithm
	reqBurst
	reqMinInterval
	reqWarmup
	reqBehavior
	reqChained // bool
	reqCalendar
	reqCreatedAt // peers only: a gubernator check's created_at
)

// numReqVarints is the number of varint fields of RateLimitRequest.
const numReqVarints = int(reqCreatedAt - reqHits + 1)

// RateLimitResponse and its metadata map's entries.
const (
	respStatus protowire.Number = iota + 1 // first varint field; the others follow up to respDelay
	respLimit
	respRemaining
	respResetTime
	respRetry
	respDelay
	respError
	respMetadata

	entryKey   protowire.Number = 1
	entryValue protowire.Number = 2
)

// Metadata keys of RateLimitResponse.
const (
	MetaOwner  = "owner"  // the node that decided
	MetaReason = "reason" // limit.Reason.String() of a failed item
)

// ErrTooMany is returned by DecodeChecks for a batch of more items than
// allowed.
var ErrTooMany = errors.New("transport: too many items")

// errInvalidUTF8 mirrors protobuf-go, which refuses to encode or decode a
// proto3 string that is not UTF-8.
var errInvalidUTF8 = errors.New("transport: string field contains invalid UTF-8")

// malformed reports bytes that are not the message what; n is protowire's
// negative length.
func malformed(what string, n int) error {
	return fmt.Errorf("transport: malformed %s: %w", what, protowire.ParseError(n))
}

// sizeVarint is the size of a proto3 varint field (tag below 16) with value
// v, 0 when v is zero and so omitted.
func sizeVarint(v uint64) int {
	if v == 0 {
		return 0
	}
	return 1 + protowire.SizeVarint(v)
}

func appendVarint(b []byte, num protowire.Number, v uint64) []byte {
	if v == 0 {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.VarintType)
	return protowire.AppendVarint(b, v)
}

// sizeString is the size of a proto3 string field (tag below 16), 0 when
// empty.
func sizeString(s string) int {
	if s == "" {
		return 0
	}
	return 1 + protowire.SizeBytes(len(s))
}

func appendString(b []byte, num protowire.Number, s string) ([]byte, error) {
	if s == "" {
		return b, nil
	}
	if !utf8.ValidString(s) {
		return nil, errInvalidUTF8
	}
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendString(b, s), nil
}

// sizeEntry and appendEntry are one map<string,string> metadata entry:
// both fields always, as protobuf-go writes them.
func sizeEntry(k, v string) int {
	return 2 + protowire.SizeBytes(len(k)) + protowire.SizeBytes(len(v))
}

func appendEntry(b []byte, k, v string) []byte {
	b = protowire.AppendTag(b, respMetadata, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(sizeEntry(k, v)))
	b = protowire.AppendTag(b, entryKey, protowire.BytesType)
	b = protowire.AppendString(b, k)
	b = protowire.AppendTag(b, entryValue, protowire.BytesType)
	return protowire.AppendString(b, v)
}

// consumeTag is protowire.ConsumeTag, also refusing field numbers above
// protowire.MaxValidNumber as proto.Unmarshal does.
func consumeTag(b []byte) (protowire.Number, protowire.Type, int) {
	num, typ, n := protowire.ConsumeTag(b)
	if n >= 0 && num > protowire.MaxValidNumber {
		return 0, 0, -1 // any negative n is a parse error
	}
	return num, typ, n
}

// decodeEntry reads a map<string,string> entry as protobuf-go does: a
// missing key or value is empty, the last occurrence wins, other fields are
// skipped, and every string read must be UTF-8.
func decodeEntry(b []byte) (k, v []byte, err error) {
	for len(b) > 0 {
		num, typ, n := consumeTag(b)
		if n < 0 {
			return nil, nil, malformed("metadata entry", n)
		}
		b = b[n:]
		if typ == protowire.BytesType && (num == entryKey || num == entryValue) {
			s, m := protowire.ConsumeBytes(b)
			if m < 0 {
				return nil, nil, malformed("metadata entry", m)
			}
			if !utf8.Valid(s) {
				return nil, nil, errInvalidUTF8
			}
			if num == entryKey {
				k = s
			} else {
				v = s
			}
			n = m
		} else if n = protowire.ConsumeFieldValue(num, typ, b); n < 0 {
			return nil, nil, malformed("metadata entry", n)
		}
		b = b[n:]
	}
	return k, v, nil
}

// stringCache turns wire bytes into strings, reusing the last one when the
// bytes repeat: a rule name or an owner is allocated once per batch, not
// once per item.
type stringCache struct{ last string }

// str checks that b is UTF-8 and returns it as a string.
func (c *stringCache) str(b []byte) (string, error) {
	if string(b) == c.last { // no allocation: the compiler compares in place
		return c.last, nil
	}
	if !utf8.Valid(b) {
		return "", errInvalidUTF8
	}
	c.last = string(b)
	return c.last, nil
}
