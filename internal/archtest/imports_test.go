// Package archtest keeps the dependency direction of docs/ARCHITECTURE.md
// ("Packages and their imports"): each project package may import only the
// project packages listed for it.
package archtest

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/shardlimiter/shardlimiter"

// allowed lists, per package directory, the project packages its non-test
// files may import. A directory missing here fails the test: new packages
// must state their place.
var allowed = map[string][]string{
	"limit":         {},
	"table":         {},
	"internal/wide": {},
	"bucket":        {"limit", "table", "internal/wide", "internal/statebytes"},
	"window":        {"limit", "table", "internal/wide", "internal/statebytes"},
	"ring":          {},
	"gossip":        {"ring"},
	// transport is what both ends of the node's own services share: names,
	// codes and errors, the Checker, the codec and the conversions of the
	// messages. Its server side and its client side are packages of their
	// own, and neither imports the other.
	"transport":               {"limit", "ring", "transport/pb", "transport/wire"},
	"transport/pb":            {},
	"transport/server":        {"limit", "transport", "transport/wire"},
	"transport/dial":          {"limit", "ring", "transport", "transport/pb", "transport/wire"},
	"transport/transporttest": {"limit", "transport", "transport/pb"},
	// Each API is a package that registers itself on the listeners of
	// transport/server; none imports another, or the node.
	"api/native":           {"limit", "ring", "transport", "transport/pb", "transport/server", "transport/wire"},
	"api/inspect":          {"limit", "transport", "transport/pb", "transport/server"},
	"api/lease":            {"limit", "transport", "transport/pb", "transport/server"},
	"api/peers":            {"limit", "transport", "transport/pb", "transport/server", "transport/wire"},
	"api/gubernator":       {"limit", "transport", "transport/server", "transport/wire", "api/gubernator/gubpb"},
	"api/gubernator/gubpb": {},
	"api/resp":             {"limit", "transport", "transport/server"},
	"api/rlqs":             {"quota", "rules", "transport/server"},
	"peer":                 {"limit", "table", "bucket", "window", "ring", "transport", "transport/dial", "snapshot", "gubernator", "cell", "internal/cowmap", "peer/rulemetrics", "peer/replicamove", "peer/leasing"},
	"cmd/shardlimiter":     {"*"},
	"loadtest":             {"limit", "transport", "transport/dial", "transport/server", "api/native", "api/gubernator/gubpb", "internal/wide", "internal/netns", "loadtest/nemesis", "client"},
	"internal/archtest":    {},
	// The cluster simulator: real nodes, rings and gossip on in-memory
	// networks, in one process; and its command.
	"sim":              {"limit", "ring", "gossip", "peer"},
	"cmd/simulate":     {"gossip", "ring", "sim"},
	"internal/poll":    {},
	"internal/netns":   {},
	"loadtest/nemesis": {"limit"},

	// TLS material and files that are reloaded when they change: standard
	// library only, so transport, cmd and tests can share them.
	"internal/certs":           {},
	"internal/certs/certstest": {},
	"internal/filewatch":       {},

	// The reader of a key's encoded state that bucket and window share: a
	// leaf, standard library only.
	"internal/statebytes": {},
	// The bounded copy-on-write map of the per-rule metrics (peer, rls).
	"internal/cowmap": {},
	// The node's per-rule series of decided checks.
	"peer/rulemetrics": {"limit", "internal/cowmap"},
	// Which partitions a ring change leaves with a replica holder that
	// holds nothing of them.
	"peer/replicamove": {"ring"},
	// The rules of leases that do not depend on the node: what is
	// leasable, a grant's TTL and size, a lessee's answers.
	"peer/leasing": {"limit", "window", "internal/statebytes"},

	// transport's codec: the protobuf wire format from and into limit's
	// types; the generated messages stay out of it.
	"transport/wire": {"limit"},

	// The public Go client and its middleware: importable without the
	// server (never peer, gossip, table or cmd).
	"client":           {"limit", "ring", "transport", "transport/dial"},
	"client/httplimit": {"limit", "client"},
	"client/grpclimit": {"limit", "client"},
	// Example programs use the public client, as an application would.
	"examples/sidecar-app": {"limit", "client", "client/httplimit"},

	// Rules from YAML files (Envoy RLS configuration) and their reload:
	// rules reads files but starts nothing; rulesfile owns the goroutine.
	"rules":           {"limit"},
	"rules/rulesfile": {"rules"},
	// The snapshot file of a node's key states (--state-dir): reads and
	// writes files, starts nothing; peer decides when.
	"snapshot": {"limit"},
	// The owner's side of Envoy's quota service: fair shares as leases; a
	// leaf like bucket and window.
	"quota": {},
	// Envoy's rate-limit service: proto types of go-control-plane stay in it.
	"rls": {"limit", "rules", "transport", "transport/server", "internal/cowmap"},

	// The status page: files embedded in the binary, read over HTTP by the
	// browser; it knows the API only by its URLs.
	"statuspage": {},
	// gubernator's TOKEN_BUCKET and LEAKY_BUCKET, for the drop-in of its
	// API: a leaf like bucket and window.
	"gubernator": {"limit", "table"},
	// redis-cell's GCRA, for CL.THROTTLE on the Redis protocol: a leaf too.
	"cell": {"limit", "table"},
}

// thirdParty lists, for the packages that are restricted, the modules
// outside the project and the standard library their non-test files may
// import: the wire speaks gRPC and protobuf and exports Prometheus metrics,
// nothing else (membership, for one, is gossip/'s business).
var thirdParty = map[string][]string{
	"transport": {"google.golang.org/grpc", "google.golang.org/protobuf",
		"google.golang.org/genproto/googleapis/rpc/errdetails"}, // RetryInfo on a shed call
	"transport/server": {"google.golang.org/grpc", "google.golang.org/protobuf", "github.com/prometheus/client_golang"},
	"transport/dial":   {"google.golang.org/grpc", "google.golang.org/protobuf", "github.com/prometheus/client_golang"},
	"api/native":       {"google.golang.org/grpc", "google.golang.org/protobuf"},
	"api/inspect":      {"google.golang.org/grpc", "google.golang.org/protobuf"},
	"api/lease":        {"google.golang.org/grpc"},
	"api/peers":        {"google.golang.org/grpc", "google.golang.org/protobuf"},
	"api/gubernator":   {"google.golang.org/grpc", "google.golang.org/protobuf"},
	// The Redis protocol: RESP through redcon, no gRPC.
	"api/resp": {"github.com/tidwall/redcon"},
	// Envoy's quota service: go-control-plane's types stay in it.
	"api/rlqs": {"github.com/envoyproxy/go-control-plane/envoy", "google.golang.org/grpc", "google.golang.org/protobuf", "github.com/prometheus/client_golang"},
	"quota":    {},

	"transport/wire": {"google.golang.org/protobuf/encoding/protowire"},

	// The client speaks gRPC through transport; no proto types of its own.
	"client":           {"google.golang.org/grpc"},
	"client/httplimit": {},
	"client/grpclimit": {"google.golang.org/grpc", "google.golang.org/genproto/googleapis/rpc/errdetails", "google.golang.org/protobuf/types/known/durationpb"},

	"rules":           {"go.yaml.in/yaml/v3"},
	"statuspage":      {},
	"rules/rulesfile": {},
	"snapshot":        {},
	"rls":             {"github.com/envoyproxy/go-control-plane/envoy", "google.golang.org/grpc", "google.golang.org/protobuf", "github.com/prometheus/client_golang"},
}

// leaves never read the clock, log or start goroutines (docs/ARCHITECTURE.md):
// time is the caller's now, and their callers own every goroutine.
var leaves = map[string]bool{"limit": true, "table": true, "internal/wide": true, "internal/statebytes": true, "internal/cowmap": true, "bucket": true, "window": true, "gubernator": true, "cell": true, "ring": true, "rules": true, "quota": true}

func TestImportDirection(t *testing.T) {
	for _, f := range moduleSources(t) { // size_test.go
		checkFile(t, f.path, f.pkg, f.src)
	}
}

func checkFile(t *testing.T, path, pkg string, src []byte) {
	t.Helper()
	allow, ok := allowed[pkg]
	if !ok {
		t.Errorf("%s: package %q has no entry in the allowed-imports table", path, pkg)
		return
	}
	f, err := parser.ParseFile(token.NewFileSet(), path, src, 0)
	if err != nil {
		t.Errorf("parse %s: %v", path, err)
		return
	}
	if leaves[pkg] {
		checkLeaf(t, path, f)
	}
	for _, imp := range f.Imports {
		p := strings.Trim(imp.Path.Value, `"`)
		if !strings.HasPrefix(p, module+"/") {
			if allowedOutside, ok := thirdParty[pkg]; ok && !stdlib(p) && !hasPrefixIn(p, allowedOutside) {
				t.Errorf("%s: %s imports %s; allowed outside the project: %v", path, pkg, p, allowedOutside)
			}
			continue
		}
		dep := strings.TrimPrefix(p, module+"/")
		if !slices.Contains(allow, "*") && !slices.Contains(allow, dep) {
			t.Errorf("%s: %s imports %s; allowed: %v (docs/ARCHITECTURE.md)", path, pkg, dep, allow)
		}
	}
}

// stdlib reports whether p is a standard library import path: its first
// element has no dot.
func stdlib(p string) bool {
	first, _, _ := strings.Cut(p, "/")
	return !strings.Contains(first, ".")
}

func hasPrefixIn(p string, prefixes []string) bool {
	for _, pre := range prefixes {
		if p == pre || strings.HasPrefix(p, pre+"/") {
			return true
		}
	}
	return false
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// checkLeaf fails on a goroutine, a clock read or a logging import.
func checkLeaf(t *testing.T, path string, f *ast.File) {
	t.Helper()
	for _, imp := range f.Imports {
		if p := strings.Trim(imp.Path.Value, `"`); p == "log" || p == "log/slog" {
			t.Errorf("%s: a leaf package imports %s", path, p)
		}
	}
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.GoStmt:
			t.Errorf("%s: a leaf package starts a goroutine", path)
		case *ast.SelectorExpr:
			if x, ok := n.X.(*ast.Ident); ok && x.Name == "time" && (n.Sel.Name == "Now" || n.Sel.Name == "Since" || n.Sel.Name == "Sleep") {
				t.Errorf("%s: a leaf package calls time.%s: time is the caller's now", path, n.Sel.Name)
			}
		}
		return true
	})
}
