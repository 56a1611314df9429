// Package archtest keeps the dependency direction of DESIGN.md §2: each
// project package may import only the project packages listed for it.
package archtest

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/shardlimiter/shardlimiter"

// allowed lists, per package directory, the project packages its non-test
// files may import. A directory missing here fails the test: new packages
// must state their place.
var allowed = map[string][]string{
	"limit":             {},
	"table":             {},
	"bucket":            {"limit", "table"},
	"window":            {"limit", "table"},
	"ring":              {},
	"transport":         {"limit", "transport/pb"},
	"transport/pb":      {},
	"peer":              {"limit", "table", "bucket", "window", "ring", "transport"},
	"cmd/shardlimiter":  {"*"},
	"loadtest":          {"limit", "transport"},
	"internal/archtest": {},
}

func TestImportDirection(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	seen := 0
	err = filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			name := d.Name()
			if path != root && (strings.HasPrefix(name, ".") || name == "testdata" || name == "bin" || fileExists(filepath.Join(path, "go.mod"))) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		rel, _ := filepath.Rel(root, filepath.Dir(path))
		rel = filepath.ToSlash(rel)
		seen++
		checkFile(t, path, rel)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if seen == 0 {
		t.Fatal("no Go files found: wrong root?")
	}
}

func checkFile(t *testing.T, path, pkg string) {
	t.Helper()
	allow, ok := allowed[pkg]
	if !ok {
		t.Errorf("%s: package %q has no entry in the allowed-imports table", path, pkg)
		return
	}
	f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly)
	if err != nil {
		t.Errorf("parse %s: %v", path, err)
		return
	}
	for _, imp := range f.Imports {
		p := strings.Trim(imp.Path.Value, `"`)
		if !strings.HasPrefix(p, module+"/") {
			continue
		}
		dep := strings.TrimPrefix(p, module+"/")
		if !slices.Contains(allow, "*") && !slices.Contains(allow, dep) {
			t.Errorf("%s: %s imports %s; allowed: %v (DESIGN.md §2)", path, pkg, dep, allow)
		}
	}
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}
