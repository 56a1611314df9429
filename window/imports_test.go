package window

import (
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestImports keeps the package a leaf: the standard library, limit and
// table only (DESIGN.md §2).
func TestImports(t *testing.T) {
	t.Parallel()
	allowed := map[string]bool{
		"github.com/shardlimiter/shardlimiter/limit": true,
		"github.com/shardlimiter/shardlimiter/table": true,
	}
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(token.NewFileSet(), name, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range f.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			first, _, _ := strings.Cut(path, "/")
			if !allowed[path] && strings.Contains(first, ".") {
				t.Errorf("%s imports %s: window may import only the standard library, limit and table", name, path)
			}
		}
	}
}
