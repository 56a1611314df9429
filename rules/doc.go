// Package rules implements server-side rate-limit rules read from YAML
// files in envoyproxy/ratelimit's configuration format, with extensions:
// an algorithm and burst per limit, several limits per descriptor
// (rate_limits), and calendar weeks, months and years.
//
// A file holds a domain and a tree of descriptors. A request names a
// domain and sends descriptors, each a list of entries (key, value); Match
// walks the tree one entry per level — exact value, then wildcard value,
// then key only — and returns the rule at the depth of the last entry,
// with the Key of the counter it uses. docs/RULES.md describes the format
// and how it differs from envoyproxy/ratelimit's.
//
// A Set is immutable once built: Parse and Load validate everything, and
// the first problem is returned as a *ConfigError naming the file and
// line. A Store holds the current Set behind an atomic pointer, so a
// reload (package rulesfile) swaps rules without a lock on the request
// path.
//
// The package reads files only in Load, reads no clock, logs nothing and
// starts no goroutines.
package rules
