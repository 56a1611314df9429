package transport

import (
	"fmt"
	"time"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/shardlimiter/shardlimiter/limit"
)

// Helpers of the hand-written decoders (reply.go, request.go). They follow
// protobuf-go's rules for what is malformed, so that a message one of them
// refuses is one proto.Unmarshal refuses too, and the other way round.

// consumeTag is protowire.ConsumeTag, also refusing field numbers above
// protowire.MaxValidNumber as proto.Unmarshal does.
func consumeTag(b []byte) (protowire.Number, protowire.Type, int) {
	num, typ, n := protowire.ConsumeTag(b)
	if n >= 0 && num > protowire.MaxValidNumber {
		return 0, 0, -1 // any negative n is a parse error
	}
	return num, typ, n
}

// wireError reports a malformed message; n is protowire's negative length.
func wireError(what string, n int) error {
	return fmt.Errorf("transport: malformed %s: %w", what, protowire.ParseError(n))
}

// decodeEntry reads a map<string,string> entry as protobuf-go does: a
// missing key or value is empty, the last occurrence wins, other fields
// are skipped, and every string read must be UTF-8.
func decodeEntry(b []byte) (k, v []byte, err error) {
	for len(b) > 0 {
		num, typ, n := consumeTag(b)
		if n < 0 {
			return nil, nil, wireError("metadata entry", n)
		}
		b = b[n:]
		if typ == protowire.BytesType && (num == entryKey || num == entryValue) {
			s, m := protowire.ConsumeBytes(b)
			if m < 0 {
				return nil, nil, wireError("metadata entry", m)
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
			return nil, nil, wireError("metadata entry", n)
		}
		b = b[n:]
	}
	return k, v, nil
}

// stringCache turns wire bytes into strings, reusing the last one when the
// bytes repeat: the owner of a batch is decoded once, not once per item.
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

// parseReasonBytes is parseReason without converting b to a string.
func parseReasonBytes(b []byte) limit.Reason {
	for _, r := range limit.Reasons() {
		if r != limit.OK && r.String() == string(b) {
			return r
		}
	}
	return limit.Internal
}

// durationMs converts wire milliseconds to a Duration, saturating.
func durationMs(ms int64) time.Duration { return time.Duration(msToNs(ms)) }
