package manifests

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// serviceDNS matches the in-cluster DNS name of the client or headless
// Service: <service>.<namespace>.svc[.cluster.local].
var serviceDNS = regexp.MustCompile(`\bshardlimiter(?:-peers)?\.([a-z0-9](?:[-a-z0-9]*[a-z0-9])?)\.svc\b`)

// TestDocsServiceNamespace: every Service DNS name written in the
// repository's docs, examples and code names the namespace the manifests
// deploy to (the overlays' namespace, which is also the chart's documented
// release namespace), so that a reader who copies one reaches the Service.
func TestDocsServiceNamespace(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("overlays/daemonset/kustomization.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var k struct {
		Namespace string `json:"namespace"`
	}
	if err := yaml.Unmarshal(b, &k); err != nil || k.Namespace == "" {
		t.Fatalf("overlays/daemonset/kustomization.yaml: namespace %q, %v", k.Namespace, err)
	}
	if k.Namespace != releaseNamespace {
		t.Errorf("the overlays deploy to %q, the chart's tests and docs to %q", k.Namespace, releaseNamespace)
	}
	n := 0
	err = filepath.WalkDir("..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		switch filepath.Ext(path) {
		case ".md", ".go", ".yaml", ".txt":
		default:
			return nil
		}
		if filepath.Base(path) == "docs_test.go" {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for i, line := range strings.Split(string(b), "\n") {
			for _, m := range serviceDNS.FindAllStringSubmatch(line, -1) {
				n++
				if m[1] != k.Namespace {
					t.Errorf("%s:%d: %s names namespace %q; the manifests deploy to %q", path, i+1, m[0], m[1], k.Namespace)
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n == 0 {
		t.Error("no Service DNS name found in the repository: is the walk reading it?")
	}
	t.Logf("%d Service DNS names checked", n)
}
