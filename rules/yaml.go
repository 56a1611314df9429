package rules

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// ConfigError is a problem in a rules file: the file and line it was found
// at (Line 0 when the problem is the file as a whole) and what it is.
type ConfigError struct {
	File string
	Line int
	Msg  string
}

func (e *ConfigError) Error() string {
	if e.Line > 0 {
		return fmt.Sprintf("rules: %s:%d: %s", e.File, e.Line, e.Msg)
	}
	return fmt.Sprintf("rules: %s: %s", e.File, e.Msg)
}

// parser reads the YAML of one file. Its methods check the shape of each
// node (mapping, sequence, scalar), reject unknown and repeated fields and
// report the line of the first problem.
type parser struct{ file string }

func (p *parser) errf(n *yaml.Node, format string, args ...any) error {
	return &ConfigError{File: p.file, Line: n.Line, Msg: fmt.Sprintf(format, args...)}
}

// documents decodes every YAML document of data.
func (p *parser) documents(data []byte) ([]*yaml.Node, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var docs []*yaml.Node
	for {
		var doc yaml.Node
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			return docs, nil
		}
		if err != nil {
			return nil, p.syntaxError(err)
		}
		if len(doc.Content) == 1 {
			docs = append(docs, doc.Content[0])
		}
	}
}

// syntaxError turns the YAML library's "yaml: line 3: did not find
// expected key" into a ConfigError with that line.
func (p *parser) syntaxError(err error) error {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	line := 0
	if rest, ok := strings.CutPrefix(msg, "line "); ok {
		if num, text, ok := strings.Cut(rest, ": "); ok {
			if l, err := strconv.Atoi(num); err == nil {
				line, msg = l, text
			}
		}
	}
	return &ConfigError{File: p.file, Line: line, Msg: "invalid YAML: " + msg}
}

// field is one key/value pair of a mapping.
type field struct{ key, val *yaml.Node }

// mapping returns the fields of mapping n (what names it in errors),
// which must all be in allowed. A null n is an empty mapping. Merge keys
// (<<) add the fields of the merged mappings that n does not set itself.
func (p *parser) mapping(n *yaml.Node, what string, allowed []string) (map[string]field, error) {
	n = resolve(n)
	if isNull(n) {
		return map[string]field{}, nil
	}
	if n.Kind != yaml.MappingNode {
		return nil, p.errf(n, "%s must be a mapping, not %s", what, kindName(n))
	}
	m := make(map[string]field, len(n.Content)/2)
	var merged []*yaml.Node
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Kind == yaml.ScalarNode && k.Tag == "!!merge" {
			merged = append(merged, v)
			continue
		}
		if k.Kind != yaml.ScalarNode || k.Tag != "!!str" {
			return nil, p.errf(k, "%s has a key that is not a string: %s", what, describe(k))
		}
		if !slices.Contains(allowed, k.Value) {
			return nil, p.errf(k, "unknown field %q in %s", k.Value, what)
		}
		if prev, ok := m[k.Value]; ok {
			return nil, p.errf(k, "field %q repeated (first on line %d)", k.Value, prev.key.Line)
		}
		m[k.Value] = field{k, v}
	}
	for _, v := range merged {
		if err := p.merge(m, v, what, allowed); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// merge adds to m the fields of the mapping, or sequence of mappings, v
// that m does not have yet.
func (p *parser) merge(m map[string]field, v *yaml.Node, what string, allowed []string) error {
	v = resolve(v)
	srcs := []*yaml.Node{v}
	if v.Kind == yaml.SequenceNode {
		srcs = v.Content
	}
	for _, src := range srcs {
		fs, err := p.mapping(src, what, allowed)
		if err != nil {
			return err
		}
		for k, f := range fs {
			if _, ok := m[k]; !ok {
				m[k] = f
			}
		}
	}
	return nil
}

// sequence returns the items of sequence n; a null n is empty.
func (p *parser) sequence(n *yaml.Node, what string) ([]*yaml.Node, error) {
	n = resolve(n)
	if isNull(n) {
		return nil, nil
	}
	if n.Kind != yaml.SequenceNode {
		return nil, p.errf(n, "%s must be a list, not %s", what, kindName(n))
	}
	return n.Content, nil
}

// str returns the text of scalar n: strings, and numbers or booleans
// as written (value: 200 is the string "200"). A null n is "".
func (p *parser) str(n *yaml.Node, what string) (string, error) {
	n = resolve(n)
	if isNull(n) {
		return "", nil
	}
	if n.Kind != yaml.ScalarNode {
		return "", p.errf(n, "%s must be a string, not %s", what, kindName(n))
	}
	return n.Value, nil
}

// yaml11Bools are the booleans of YAML 1.1 that YAML 1.2 reads as
// strings; envoyproxy/ratelimit's files may use them.
var yaml11Bools = map[string]bool{"y": true, "yes": true, "on": true, "n": false, "no": false, "off": false}

// boolean returns the value of boolean scalar n; a null n is false.
func (p *parser) boolean(n *yaml.Node, what string) (bool, error) {
	n = resolve(n)
	if isNull(n) {
		return false, nil
	}
	if v, ok := yaml11Bools[strings.ToLower(n.Value)]; ok && n.Kind == yaml.ScalarNode && n.Style == 0 {
		return v, nil
	}
	var b bool
	if n.Kind != yaml.ScalarNode || n.Tag != "!!bool" || n.Decode(&b) != nil {
		return false, p.errf(n, "%s must be true or false, not %s", what, describe(n))
	}
	return b, nil
}

// integer returns the value of integer scalar n in [0, max]; a null n is 0.
func (p *parser) integer(n *yaml.Node, what string, max int64) (int64, error) {
	n = resolve(n)
	if isNull(n) {
		return 0, nil
	}
	var v int64
	if n.Kind != yaml.ScalarNode || n.Tag != "!!int" || n.Decode(&v) != nil {
		return 0, p.errf(n, "%s must be a whole number, not %s", what, describe(n))
	}
	if v < 0 || v > max {
		return 0, p.errf(n, "%s must be in [0, %d], got %d", what, max, v)
	}
	return v, nil
}

// resolve follows an alias to the node it names.
func resolve(n *yaml.Node) *yaml.Node {
	for n != nil && n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	return n
}

func isNull(n *yaml.Node) bool {
	return n == nil || n.Kind == yaml.ScalarNode && n.Tag == "!!null"
}

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		return describe(n)
	}
	return "an alias"
}

// describe names a scalar for an error message, e.g. `"fortnight"` or `12.5`.
func describe(n *yaml.Node) string {
	if n.Kind != yaml.ScalarNode {
		return kindName(n)
	}
	if n.Tag == "!!str" {
		return strconv.Quote(n.Value)
	}
	return n.Value
}
