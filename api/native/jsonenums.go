package native

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/shardlimiter/shardlimiter/transport/pb"
	"github.com/shardlimiter/shardlimiter/transport/wire"
)

// JSON requests, read leniently where protojson is strict and a caller's
// mistake should cost one item, not the batch:
//
//   - Enum names (algorithm, behavior, calendar) match in any case:
//     "token_bucket" is TOKEN_BUCKET, as on the command line and in rules
//     files.
//   - An enum name that names nothing ("GCRA") fails its item alone, with an
//     error that lists the names; the other items are decided.
//   - Errors name fields as the API documents them (duration_ms, not
//     protojson's durationMs) and an empty body says so.
//
// protojson decodes the body first, as is; only a body it refuses is
// looked at again (decodeRequest), so well-formed requests pay nothing.

// enumFields are the enum fields of a RateLimitRequest, by the JSON names a
// request may use for them.
var enumFields = map[string]protoreflect.EnumDescriptor{}

// protoNames maps the JSON (lowerCamelCase) name of each RateLimitRequest
// field to its proto name, for error messages.
var protoNames = map[string]string{}

func init() {
	fields := (&pb.RateLimitRequest{}).ProtoReflect().Descriptor().Fields()
	for i := range fields.Len() {
		f := fields.Get(i)
		protoNames[f.JSONName()] = string(f.Name())
		if e := f.Enum(); e != nil {
			enumFields[string(f.Name())] = e
			enumFields[f.JSONName()] = e
		}
	}
}

// badEnum is an item's enum field whose name matched no value: the item is
// answered with this error, the rest of the batch is decided.
type badEnum struct {
	item int
	err  error
}

// Enum numbers that stand for a name that matched nothing: out of range for
// each field, so the item fails conversion (wire.Request.Check) and its
// error is then replaced by the badEnum's.
const unknownEnumNumber = 1 << 20

// decodeRequest decodes a GetRateLimitsRequest body into req. It returns
// the items whose enum names matched nothing, to be answered with their
// error. A body that is empty or not a request fails the whole call.
func decodeRequest(body []byte, req *pb.GetRateLimitsRequest) ([]badEnum, error) {
	err := protojson.Unmarshal(body, req)
	if err == nil {
		return nil, nil
	}
	if len(bytes.TrimSpace(body)) == 0 {
		return nil, errors.New("transport: empty request body: want a JSON GetRateLimitsRequest, {\"requests\":[…]}")
	}
	fixed, bad, ok := fixEnums(body)
	if ok {
		req.Reset()
		if err2 := protojson.Unmarshal(fixed, req); err2 == nil {
			return bad, nil
		}
	}
	return nil, fmt.Errorf("transport: bad JSON: %s", protojsonMessage(err))
}

// protoName is the proto name of a RateLimitRequest field a request names
// by either of its names.
func protoName(field string) string {
	if p, ok := protoNames[field]; ok {
		return p
	}
	return field
}

// protojsonMessage is err's text without protojson's "proto: " prefix and
// with proto field names (duration_ms) for the JSON names it uses.
func protojsonMessage(err error) string {
	msg := strings.TrimPrefix(err.Error(), "proto: ")
	msg = strings.TrimPrefix(msg, "proto:\u00a0") // protojson may use a non-breaking space
	for json, proto := range protoNames {
		if json != proto {
			msg = strings.ReplaceAll(msg, "field "+json+":", "field "+proto+":")
		}
	}
	return msg
}

// fixEnums rewrites the enum names of the items of body: a name that
// matches a value in any case becomes that value's name, one that matches
// none becomes unknownEnumNumber and is reported in bad. It reports false
// when body is not JSON it can walk (protojson's own error then stands).
func fixEnums(body []byte) (fixed []byte, bad []badEnum, ok bool) {
	type edit struct {
		start, end int
		with       string
	}
	var edits []edit
	err := walkItemFields(body, func(item int, field string, start, end int, value any) {
		e := enumFields[field]
		name, isString := value.(string)
		if e == nil || !isString {
			return
		}
		if v := matchEnum(e, name); v != nil {
			edits = append(edits, edit{start, end, strconv.Quote(string(v.Name()))})
			return
		}
		edits = append(edits, edit{start, end, strconv.Itoa(unknownEnumNumber)})
		bad = append(bad, badEnum{item: item, err: unknownName(e, protoName(field), name)})
	})
	if err != nil || len(edits) == 0 {
		return nil, nil, false
	}
	out := make([]byte, 0, len(body)+16)
	last := 0
	for _, e := range edits {
		out = append(out, body[last:e.start]...)
		out = append(out, e.with...)
		last = e.end
	}
	return append(out, body[last:]...), bad, true
}

// matchEnum returns the value of e named name in any case, or nil.
func matchEnum(e protoreflect.EnumDescriptor, name string) protoreflect.EnumValueDescriptor {
	values := e.Values()
	for i := range values.Len() {
		if v := values.Get(i); strings.EqualFold(string(v.Name()), name) {
			return v
		}
	}
	return nil
}

// unknownName is the error of an item whose field names no value of e.
func unknownName(e protoreflect.EnumDescriptor, field, name string) error {
	values := e.Values()
	names := make([]string, values.Len())
	for i := range names {
		names[i] = string(values.Get(i).Name())
	}
	return fmt.Errorf("unknown %s %q: want one of %s", field, name, strings.Join(names, ", "))
}

// walkItemFields calls fn for each field of each object in the top-level
// "requests" array of body, with the item's index, the field's name, the
// byte range of its value and the value decoded (nil for an object or an
// array, which it does not enter).
func walkItemFields(body []byte, fn func(item int, field string, start, end int, value any)) error {
	d := json.NewDecoder(bytes.NewReader(body))
	d.UseNumber()
	if t, err := d.Token(); err != nil || t != json.Delim('{') {
		return errNotRequest
	}
	for d.More() {
		key, err := d.Token()
		if err != nil {
			return err
		}
		if key != "requests" {
			if err := skipValue(d); err != nil {
				return err
			}
			continue
		}
		if t, err := d.Token(); err != nil || t != json.Delim('[') {
			return errNotRequest
		}
		for item := 0; d.More(); item++ {
			if t, err := d.Token(); err != nil || t != json.Delim('{') {
				return errNotRequest
			}
			for d.More() {
				field, err := d.Token()
				if err != nil {
					return err
				}
				start := valueStart(body, int(d.InputOffset()))
				v, err := d.Token()
				if err != nil {
					return err
				}
				if delim, ok := v.(json.Delim); ok {
					if err := skipNested(d, delim); err != nil {
						return err
					}
					continue
				}
				name, _ := field.(string)
				fn(item, name, start, int(d.InputOffset()), v)
			}
			if _, err := d.Token(); err != nil { // '}'
				return err
			}
		}
		if _, err := d.Token(); err != nil { // ']'
			return err
		}
	}
	return nil
}

var errNotRequest = errors.New("transport: not a GetRateLimitsRequest")

// valueStart returns where the value after a key that ends at off begins:
// past the blanks and the colon.
func valueStart(body []byte, off int) int {
	for off < len(body) && (body[off] == ' ' || body[off] == '\t' || body[off] == '\n' || body[off] == '\r' || body[off] == ':') {
		off++
	}
	return off
}

// skipValue reads one value, entering objects and arrays.
func skipValue(d *json.Decoder) error {
	t, err := d.Token()
	if err != nil {
		return err
	}
	if delim, ok := t.(json.Delim); ok {
		return skipNested(d, delim)
	}
	return nil
}

// skipNested reads up to the end of the object or array opened by delim.
func skipNested(d *json.Decoder, delim json.Delim) error {
	if delim != '{' && delim != '[' {
		return errNotRequest
	}
	for depth := 1; depth > 0; {
		t, err := d.Token()
		if err == io.EOF {
			return errNotRequest
		} else if err != nil {
			return err
		}
		switch t {
		case json.Delim('{'), json.Delim('['):
			depth++
		case json.Delim('}'), json.Delim(']'):
			depth--
		}
	}
	return nil
}

// failBadEnums answers the items of bad with their errors in checks, where
// they failed conversion for their out-of-range number.
func failBadEnums(checks *wire.Checks, bad []badEnum) {
	for _, b := range bad {
		for i := range checks.Failed {
			if checks.Failed[i].Index == b.item {
				checks.Failed[i].Err = b.err
				break
			}
		}
	}
}
