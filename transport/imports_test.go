package transport

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestImports keeps the dependency rule of DESIGN §2: transport imports the
// standard library, limit, its own pb, and the gRPC, protobuf and Prometheus
// client modules; nothing else of the project (peer, ring, bucket, window).
func TestImports(t *testing.T) {
	t.Parallel()
	allowed := []string{
		"github.com/shardlimiter/shardlimiter/limit",
		"github.com/shardlimiter/shardlimiter/transport/pb",
		"google.golang.org/grpc",
		"google.golang.org/protobuf",
		"github.com/prometheus/client_golang",
		"go.uber.org/goleak",                             // tests only
		"github.com/shardlimiter/shardlimiter/transport", // the example, package transport_test
	}
	for _, dir := range []string{".", "pb"} {
		files, err := filepath.Glob(filepath.Join(dir, "*.go"))
		if err != nil {
			t.Fatal(err)
		}
		for _, file := range files {
			src, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			f, err := parser.ParseFile(token.NewFileSet(), file, src, parser.ImportsOnly)
			if err != nil {
				t.Fatalf("parse %s: %v", file, err)
			}
			for _, imp := range f.Imports {
				path, _ := strconv.Unquote(imp.Path.Value)
				if !importAllowed(path, allowed) {
					t.Errorf("%s imports %q, which transport may not use", file, path)
				}
			}
		}
	}
}

func importAllowed(path string, allowed []string) bool {
	if first, _, _ := strings.Cut(path, "/"); !strings.Contains(first, ".") {
		return true // standard library
	}
	for _, a := range allowed {
		if path == a || strings.HasPrefix(path, a+"/") {
			return true
		}
	}
	return false
}
