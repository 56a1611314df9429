package archtest

import (
	"bytes"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// The size rules of docs/ARCHITECTURE.md ("Packages and their imports"):
// no package holds more than maxPackageShare of the module's non-test,
// non-generated code (examples aside),
// no function outside generated code is longer than maxFuncLines, and at
// most maxLongFuncs are longer than longFuncLines. A package that outgrows
// its share is one that holds more than one job; a function past the bound
// is two functions.
const (
	maxPackageShare = 0.15
	maxFuncLines    = 80
	longFuncLines   = 60
	maxLongFuncs    = 5
)

// sourceFile is one non-test Go file of the module.
type sourceFile struct {
	path, pkg string // pkg: its directory, relative to the module root
	src       []byte
}

// moduleSources lists the module's non-test Go files (other modules,
// testdata and hidden directories left out).
func moduleSources(t *testing.T) []sourceFile {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	var out []sourceFile
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
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, filepath.Dir(path))
		out = append(out, sourceFile{path: path, pkg: filepath.ToSlash(rel), src: src})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(out) == 0 {
		t.Fatal("no Go files found: wrong root?")
	}
	return out
}

// generated reports whether src carries Go's generated-code marker, a
// line "// Code generated … DO NOT EDIT." before the package clause.
func generated(src []byte) bool {
	for line := range bytes.Lines(src) {
		l := strings.TrimSpace(string(line))
		if strings.HasPrefix(l, "// Code generated ") && strings.HasSuffix(l, " DO NOT EDIT.") {
			return true
		}
		if strings.HasPrefix(l, "package ") {
			return false
		}
	}
	return false
}

func TestPackageShare(t *testing.T) {
	lines := map[string]int{}
	total := 0
	for _, f := range moduleSources(t) {
		if generated(f.src) || strings.HasPrefix(f.pkg, "examples/") {
			continue
		}
		n := bytes.Count(f.src, []byte("\n"))
		lines[f.pkg] += n
		total += n
	}
	for pkg, n := range lines {
		if share := float64(n) / float64(total); share > maxPackageShare {
			t.Errorf("package %s holds %d of %d non-test lines (%.1f%%), more than %.0f%%", pkg, n, total, 100*share, 100*maxPackageShare)
		}
	}
}

func TestFunctionLength(t *testing.T) {
	var long []string
	for _, f := range moduleSources(t) {
		if generated(f.src) {
			continue
		}
		fset := token.NewFileSet()
		file, err := parser.ParseFile(fset, f.path, f.src, 0)
		if err != nil {
			t.Fatalf("parse %s: %v", f.path, err)
		}
		for _, d := range file.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Body == nil {
				continue
			}
			n := fset.Position(fn.End()).Line - fset.Position(fn.Pos()).Line + 1
			where := fmt.Sprintf("%s/%s (%d lines)", f.pkg, fn.Name.Name, n)
			if n > maxFuncLines {
				t.Errorf("%s: longer than %d lines", where, maxFuncLines)
			}
			if n > longFuncLines {
				long = append(long, where)
			}
		}
	}
	slices.Sort(long)
	if len(long) > maxLongFuncs {
		t.Errorf("%d functions over %d lines, at most %d allowed: %s", len(long), longFuncLines, maxLongFuncs, strings.Join(long, ", "))
	}
}
