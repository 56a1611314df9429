package wire

import (
	"fmt"
	"strings"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/shardlimiter/shardlimiter/limit"
)

// The keys of shardlimiter.v1.State's PushStateRequest (state.proto), the
// message of handoff and of every replication round:
//
//	PushStateRequest { string from = 1; Transfer transfer = 2;
//	                   repeated KeyState keys = 3; repeated uint32 partitions = 4 (packed) }
//	KeyState         { Algorithm algorithm = 1; bytes key = 2; bytes state = 3 }
//
// encoded straight from and decoded straight into []limit.KeyState: no
// generated message, no copy of each key and state into one, per key. A
// decoded push takes a handful of allocations whatever its size: its keys
// are substrings of one string and its states subslices of one buffer.

// PushState fields.
const (
	pushFrom protowire.Number = iota + 1
	pushTransfer
	pushKeys
	pushPartitions
)

// KeyState fields.
const (
	ksAlgorithm protowire.Number = iota + 1
	ksKey
	ksState
)

// Push is a decoded PushStateRequest. Transfer is the enum's number as
// sent; the caller decides what an unknown one means.
type Push struct {
	From       string
	Transfer   int32
	Keys       []limit.KeyState
	Partitions []uint32
}

// sizeKeyState is the size of one KeyState message, without its framing.
func sizeKeyState(k *limit.KeyState) int {
	n := sizeVarint(uint64(k.Algorithm))
	if len(k.Key) > 0 {
		n += 1 + protowire.SizeBytes(len(k.Key))
	}
	if len(k.State) > 0 {
		n += 1 + protowire.SizeBytes(len(k.State))
	}
	return n
}

// sizePartitions is the size of the packed partitions' payload.
func sizePartitions(parts []int) int {
	n := 0
	for _, p := range parts {
		n += protowire.SizeVarint(uint64(uint32(p)))
	}
	return n
}

// SizePush is the size of AppendPush's encoding.
func SizePush(from string, transfer int32, keys []limit.KeyState, parts []int) int {
	n := sizeString(from) + sizeVarint(uint64(int64(transfer)))
	for i := range keys {
		n += 1 + protowire.SizeBytes(sizeKeyState(&keys[i]))
	}
	if len(parts) > 0 {
		n += 1 + protowire.SizeBytes(sizePartitions(parts))
	}
	return n
}

// AppendPush appends a PushStateRequest to b, as
// proto.MarshalOptions{Deterministic: true} writes it. Partitions are sent
// as uint32, as the field is. It fails only for a from that is not UTF-8.
func AppendPush(b []byte, from string, transfer int32, keys []limit.KeyState, parts []int) ([]byte, error) {
	b, err := appendString(b, pushFrom, from)
	if err != nil {
		return nil, err
	}
	b = appendVarint(b, pushTransfer, uint64(int64(transfer)))
	for i := range keys {
		k := &keys[i]
		b = protowire.AppendTag(b, pushKeys, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(sizeKeyState(k)))
		b = appendVarint(b, ksAlgorithm, uint64(k.Algorithm))
		if len(k.Key) > 0 {
			b = protowire.AppendTag(b, ksKey, protowire.BytesType)
			b = protowire.AppendString(b, k.Key)
		}
		if len(k.State) > 0 {
			b = protowire.AppendTag(b, ksState, protowire.BytesType)
			b = protowire.AppendBytes(b, k.State)
		}
	}
	if len(parts) > 0 {
		b = protowire.AppendTag(b, pushPartitions, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(sizePartitions(parts)))
		for _, p := range parts {
			b = protowire.AppendVarint(b, uint64(uint32(p)))
		}
	}
	return b, nil
}

// DecodePush decodes a PushStateRequest as proto.Unmarshal does (the last
// occurrence of a scalar wins, repeated fields accumulate, partitions may
// be packed or not, unknown fields and fields of the wrong wire type are
// skipped, from must be UTF-8) and converts its keys: an algorithm outside
// limit's is an error, as it is for the generated message's conversion.
// maxKeys bounds the keys: a push with more fails before they are decoded.
// Nothing of data is kept.
func DecodePush(data []byte, maxKeys int) (Push, error) {
	var d pushDecoder
	if n, size, err := countField(data, pushKeys); err != nil {
		return Push{}, err
	} else if n > maxKeys {
		return Push{}, fmt.Errorf("transport: %d key states in one push, max %d", n, maxKeys)
	} else if n > 0 {
		d.p.Keys, d.keyEnd = make([]limit.KeyState, 0, n), make([]int, 0, n)
		d.keyBuf.Grow(size)
		d.stateBuf = make([]byte, 0, size)
	}
	for b := data; len(b) > 0; {
		num, typ, n := consumeTag(b)
		if n < 0 {
			return Push{}, malformed("push", n)
		}
		b = b[n:]
		if n = d.field(num, typ, b); n < 0 {
			return Push{}, d.fieldError(n)
		}
		b = b[n:]
	}
	return d.push(), nil
}

// pushDecoder holds a push being decoded. Every key goes into one string
// and every state into one buffer, each allocated at the size of all the
// key states (more than the keys or the states take): neither grows, so a
// state is a subslice at once and a key is known by where it ends.
type pushDecoder struct {
	p        Push
	keyBuf   strings.Builder
	stateBuf []byte
	keyEnd   []int
	err      error // why field failed, when it is not malformed framing
}

// field decodes one field of the message from b and returns the bytes it
// took, or a negative protowire error code; errBadField when d.err says
// why.
func (d *pushDecoder) field(num protowire.Number, typ protowire.Type, b []byte) int {
	switch {
	case num == pushFrom && typ == protowire.BytesType:
		s, m := protowire.ConsumeBytes(b)
		if m >= 0 && !utf8.Valid(s) {
			d.err = errInvalidUTF8
			return errBadField
		}
		d.p.From = string(s)
		return m
	case num == pushTransfer && typ == protowire.VarintType:
		v, m := protowire.ConsumeVarint(b)
		d.p.Transfer = int32(v)
		return m
	case num == pushKeys && typ == protowire.BytesType:
		s, m := protowire.ConsumeBytes(b)
		if m >= 0 {
			if d.err = d.key(s); d.err != nil {
				return errBadField
			}
		}
		return m
	case num == pushPartitions && typ == protowire.VarintType:
		v, m := protowire.ConsumeVarint(b)
		d.p.Partitions = append(d.p.Partitions, uint32(v))
		return m
	case num == pushPartitions && typ == protowire.BytesType:
		s, m := protowire.ConsumeBytes(b)
		for len(s) > 0 && m >= 0 {
			v, k := protowire.ConsumeVarint(s)
			if k < 0 {
				return k
			}
			d.p.Partitions, s = append(d.p.Partitions, uint32(v)), s[k:]
		}
		return m
	}
	return protowire.ConsumeFieldValue(num, typ, b)
}

// errBadField is field's answer for a field that frames well but whose
// content is refused (d.err): below protowire's own error codes.
const errBadField = -1 << 20

func (d *pushDecoder) fieldError(n int) error {
	if n == errBadField {
		return d.err
	}
	return malformed("push", n)
}

// key appends one KeyState message.
func (d *pushDecoder) key(s []byte) error {
	alg, key, state, err := decodeKeyState(s)
	if err != nil {
		return err
	}
	if alg < 0 || alg > 0xFF || !limit.Algorithm(alg).Moved() { // the gubernator and Cell algorithms' numbers are internal: nodes move their keys too, and lease books
		return fmt.Errorf("transport: key state %d: unknown algorithm %d", len(d.p.Keys), alg)
	}
	ks := limit.KeyState{Algorithm: limit.Algorithm(alg)}
	if len(state) > 0 {
		from := len(d.stateBuf)
		d.stateBuf = append(d.stateBuf, state...)
		ks.State = d.stateBuf[from:len(d.stateBuf):len(d.stateBuf)]
	}
	d.keyBuf.Write(key)
	d.p.Keys, d.keyEnd = append(d.p.Keys, ks), append(d.keyEnd, d.keyBuf.Len())
	return nil
}

// push returns the decoded push, its keys cut from the one string.
func (d *pushDecoder) push() Push {
	if d.p.Keys == nil {
		d.p.Keys = []limit.KeyState{} // what the generated message's conversion gives
	}
	keys := d.keyBuf.String() // one allocation for every key, not copied again
	from := 0
	for i, to := range d.keyEnd {
		d.p.Keys[i].Key, from = keys[from:to], to
	}
	return d.p
}

// decodeKeyState reads one KeyState: the last occurrence of each field
// wins, other fields are skipped.
func decodeKeyState(b []byte) (alg int32, key, state []byte, err error) {
	for len(b) > 0 {
		num, typ, n := consumeTag(b)
		if n < 0 {
			return 0, nil, nil, malformed("key state", n)
		}
		b = b[n:]
		switch {
		case num == ksAlgorithm && typ == protowire.VarintType:
			v, m := protowire.ConsumeVarint(b)
			if m < 0 {
				return 0, nil, nil, malformed("key state", m)
			}
			alg, n = int32(v), m
		case (num == ksKey || num == ksState) && typ == protowire.BytesType:
			s, m := protowire.ConsumeBytes(b)
			if m < 0 {
				return 0, nil, nil, malformed("key state", m)
			}
			if num == ksKey {
				key = s
			} else {
				state = s
			}
			n = m
		default:
			if n = protowire.ConsumeFieldValue(num, typ, b); n < 0 {
				return 0, nil, nil, malformed("key state", n)
			}
		}
		b = b[n:]
	}
	return alg, key, state, nil
}

// countField counts the top-level length-delimited occurrences of field num
// in a message and the bytes they hold, checking only the framing.
func countField(b []byte, num protowire.Number) (count, size int, err error) {
	for len(b) > 0 {
		f, typ, n := consumeTag(b)
		if n < 0 {
			return 0, 0, malformed("push", n)
		}
		b = b[n:]
		if n = protowire.ConsumeFieldValue(f, typ, b); n < 0 {
			return 0, 0, malformed("push", n)
		}
		if f == num && typ == protowire.BytesType {
			count++
			size += n
		}
		b = b[n:]
	}
	return count, size, nil
}
