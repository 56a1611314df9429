package rules

import (
	"fmt"
	"math"

	"go.yaml.in/yaml/v3"
)

// metadata reads a descriptor's metadata field: a mapping of arbitrary
// values, as envoyproxy/ratelimit takes it (it is returned in dynamic
// metadata, never matched). Values must have a JSON form: strings,
// numbers, booleans, nulls, lists and mappings with string keys. An
// absent or null field is nil.
func (p *parser) metadata(f field) (map[string]any, error) {
	n := resolve(f.val)
	if f.key == nil || isNull(n) {
		return nil, nil
	}
	if n.Kind != yaml.MappingNode {
		return nil, p.errf(n, "metadata must be a mapping, not %s", kindName(n))
	}
	var m map[string]any
	if err := n.Decode(&m); err != nil {
		return nil, p.errf(n, "metadata: %v", err)
	}
	if err := jsonValue(m); err != nil {
		return nil, p.errf(n, "metadata: %v", err)
	}
	return m, nil
}

// jsonValue reports the first value under v that has no JSON form, and
// turns integers into float64 (the numbers of JSON and of
// google.protobuf.Struct) in place.
func jsonValue(v any) error {
	switch v := v.(type) {
	case map[string]any:
		for k, e := range v {
			n, err := jsonNumber(e)
			if err == nil {
				v[k] = n
				err = jsonValue(n)
			}
			if err != nil {
				return fmt.Errorf("%s: %w", k, err)
			}
		}
	case []any:
		for i, e := range v {
			n, err := jsonNumber(e)
			if err == nil {
				v[i] = n
				err = jsonValue(n)
			}
			if err != nil {
				return fmt.Errorf("item %d: %w", i, err)
			}
		}
	case nil, string, bool, float64:
	default:
		return fmt.Errorf("a value of type %T has no JSON form", v)
	}
	return nil
}

// jsonNumber is v with any number as a finite float64; other values are
// returned as they are.
func jsonNumber(v any) (any, error) {
	var f float64
	switch n := v.(type) {
	case int:
		f = float64(n)
	case int64:
		f = float64(n)
	case uint64:
		f = float64(n)
	case float64:
		f = n
	default:
		return v, nil
	}
	if math.IsInf(f, 0) || math.IsNaN(f) {
		return nil, fmt.Errorf("%v is not a JSON number", f)
	}
	return f, nil
}
