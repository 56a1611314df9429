package transport

import (
	"errors"
	"slices"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/shardlimiter/shardlimiter/transport/pb"
)

// Hand-written protobuf encoding of the responses the server sends.
//
// Why by hand: protobuf-go marshals map<string,string> metadata through
// reflection, entry by entry, and that was most of the server's CPU per
// check (profile in the commit that added this file). Here the encoding is
// plain appends, and the metadata entry {"owner": X} that almost every item
// of a batch carries is encoded once per batch and copied per item.
//
// What must stay byte-compatible: the output is ordinary proto3 wire format
// for shardlimiter.v1 — fields in number order, zero values omitted, map
// entries with key and value always written, keys in sorted order — which is
// exactly what proto.MarshalOptions{Deterministic: true} produces, so any
// standard decoder (grpcurl, generated clients) reads it. wire_test.go checks
// byte equality against proto.Marshal over random messages, and a fuzz target
// checks the round trip.

// Field numbers of shardlimiter.v1, from shardlimiter.proto.
const (
	fieldItems protowire.Number = 1 // Get/ForwardRateLimitsResponse.responses, …Request.requests
	fieldOwner protowire.Number = 2 // ForwardRateLimitsResponse.owner

	respStatus    protowire.Number = 1
	respLimit     protowire.Number = 2
	respRemaining protowire.Number = 3
	respResetTime protowire.Number = 4
	respRetry     protowire.Number = 5
	respDelay     protowire.Number = 6
	respError     protowire.Number = 7
	respMetadata  protowire.Number = 8

	entryKey   protowire.Number = 1 // map entry key
	entryValue protowire.Number = 2 // map entry value
)

// errInvalidUTF8 mirrors proto.Marshal, which refuses a proto3 string that
// is not UTF-8: a standard decoder would refuse it too.
var errInvalidUTF8 = errors.New("transport: string field contains invalid UTF-8")

// responseEncoder encodes one response message. Not safe for concurrent use;
// the codec makes one per call.
type responseEncoder struct {
	owner string // value of the cached owner-only metadata entry
	entry []byte // that entry encoded: tag, length, key, value; nil: none yet
}

// sizeGet and appendGet encode a GetRateLimitsResponse.
func (e *responseEncoder) sizeGet(m *pb.GetRateLimitsResponse) int {
	return e.sizeItems(m.GetResponses())
}

func (e *responseEncoder) appendGet(b []byte, m *pb.GetRateLimitsResponse) ([]byte, error) {
	return e.appendItems(b, m.GetResponses())
}

// sizeForward and appendForward encode a ForwardRateLimitsResponse.
func (e *responseEncoder) sizeForward(m *pb.ForwardRateLimitsResponse) int {
	return e.sizeItems(m.GetResponses()) + sizeString(m.GetOwner())
}

func (e *responseEncoder) appendForward(b []byte, m *pb.ForwardRateLimitsResponse) ([]byte, error) {
	b, err := e.appendItems(b, m.GetResponses())
	if err != nil {
		return nil, err
	}
	return appendString(b, fieldOwner, m.GetOwner())
}

func (e *responseEncoder) sizeItems(items []*pb.RateLimitResponse) int {
	n := 0
	for _, r := range items {
		n += 1 + protowire.SizeBytes(sizeItem(r))
	}
	return n
}

func (e *responseEncoder) appendItems(b []byte, items []*pb.RateLimitResponse) ([]byte, error) {
	var err error
	for _, r := range items {
		b = protowire.AppendTag(b, fieldItems, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(sizeItem(r)))
		if b, err = e.appendItem(b, r); err != nil {
			return nil, err
		}
	}
	return b, nil
}

// sizeItem is the encoded size of one RateLimitResponse, without its own
// tag and length.
func sizeItem(r *pb.RateLimitResponse) int {
	n := sizeVarint(uint64(r.GetStatus())) + sizeVarint(uint64(r.GetLimit())) +
		sizeVarint(uint64(r.GetRemaining())) + sizeVarint(uint64(r.GetResetTimeMs())) +
		sizeVarint(uint64(r.GetRetryAfterMs())) + sizeVarint(uint64(r.GetDelayMs())) +
		sizeString(r.GetError())
	return n + sizeMetadata(r.GetMetadata())
}

// sizeMetadata avoids a map iteration for the common owner-only map.
func sizeMetadata(m map[string]string) int {
	if len(m) == 1 {
		if v, ok := m[metaOwner]; ok {
			return 1 + protowire.SizeBytes(sizeEntry(metaOwner, v))
		}
	}
	n := 0
	for k, v := range m {
		n += 1 + protowire.SizeBytes(sizeEntry(k, v))
	}
	return n
}

func (e *responseEncoder) appendItem(b []byte, r *pb.RateLimitResponse) ([]byte, error) {
	b = appendVarint(b, respStatus, uint64(r.GetStatus()))
	b = appendVarint(b, respLimit, uint64(r.GetLimit()))
	b = appendVarint(b, respRemaining, uint64(r.GetRemaining()))
	b = appendVarint(b, respResetTime, uint64(r.GetResetTimeMs()))
	b = appendVarint(b, respRetry, uint64(r.GetRetryAfterMs()))
	b = appendVarint(b, respDelay, uint64(r.GetDelayMs()))
	b, err := appendString(b, respError, r.GetError())
	if err != nil {
		return nil, err
	}
	return e.appendMetadata(b, r.GetMetadata())
}

// appendMetadata writes the map entries in key order. The common map,
// {"owner": X} with the same X as the item before, costs one copy.
func (e *responseEncoder) appendMetadata(b []byte, m map[string]string) ([]byte, error) {
	switch len(m) {
	case 0:
		return b, nil
	case 1:
		if owner, ok := m[metaOwner]; ok {
			if e.entry == nil || owner != e.owner {
				if !utf8.ValidString(owner) {
					return nil, errInvalidUTF8
				}
				e.owner, e.entry = owner, appendEntry(e.entry[:0], metaOwner, owner)
			}
			return append(b, e.entry...), nil
		}
	}
	var buf [4]string
	keys := buf[:0]
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		v := m[k]
		if !utf8.ValidString(k) || !utf8.ValidString(v) {
			return nil, errInvalidUTF8
		}
		b = appendEntry(b, k, v)
	}
	return b, nil
}

// appendEntry writes one map<string,string> entry: both fields always, as
// protobuf-go does.
func appendEntry(b []byte, k, v string) []byte {
	b = protowire.AppendTag(b, respMetadata, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(sizeEntry(k, v)))
	b = protowire.AppendTag(b, entryKey, protowire.BytesType)
	b = protowire.AppendString(b, k)
	b = protowire.AppendTag(b, entryValue, protowire.BytesType)
	return protowire.AppendString(b, v)
}

func sizeEntry(k, v string) int {
	return 2 + protowire.SizeBytes(len(k)) + protowire.SizeBytes(len(v))
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
