package bucket

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestLeafPackage keeps bucket a leaf (DESIGN.md §2): it imports the
// standard library, limit and table only, and never reads the clock, logs
// or starts a goroutine.
func TestLeafPackage(t *testing.T) {
	t.Parallel()
	project := map[string]bool{
		"github.com/shardlimiter/shardlimiter/limit": true,
		"github.com/shardlimiter/shardlimiter/table": true,
	}
	forbidden := map[string]bool{"log": true, "log/slog": true}
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(token.NewFileSet(), name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range f.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			host, _, _ := strings.Cut(path, "/")
			if forbidden[path] || strings.Contains(host, ".") && !project[path] {
				t.Errorf("%s imports %s", name, path)
			}
		}
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.GoStmt:
				t.Errorf("%s starts a goroutine", name)
			case *ast.SelectorExpr:
				if x, ok := n.X.(*ast.Ident); ok && x.Name == "time" && (n.Sel.Name == "Now" || n.Sel.Name == "Since" || n.Sel.Name == "Sleep") {
					t.Errorf("%s calls time.%s: time is the caller's now", name, n.Sel.Name)
				}
			}
			return true
		})
	}
}
