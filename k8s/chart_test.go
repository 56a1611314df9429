package manifests

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/cli/values"
	"helm.sh/helm/v3/pkg/getter"
	"helm.sh/helm/v3/pkg/lint"
	"helm.sh/helm/v3/pkg/lint/support"
)

// The Helm chart, rendered through the Helm SDK exactly as `helm template`
// renders it (a client-only dry-run install), with the release name and
// namespace that make its object names those of the overlays.
const (
	chartDir         = "../deploy/helm/shardlimiter"
	releaseName      = "shardlimiter"
	releaseNamespace = "shardlimiter"
)

// chartKubeVersion stands for the cluster: `helm template` built from source
// reports Kubernetes 1.20 unless told otherwise, below the chart's
// kubeVersion constraint.
var chartKubeVersion = chartutil.KubeVersion{Version: "v1.33.0", Major: "1", Minor: "33"}

// chartValues are the command-line values of one rendering: -f files
// (relative to this directory) and --set expressions.
type chartValues struct {
	files []string
	set   []string
}

func (v chartValues) merge() (map[string]any, error) {
	opts := values.Options{ValueFiles: v.files, Values: v.set}
	return opts.MergeValues(getter.Providers{})
}

func loadChart(dir string) (*chart.Chart, error) {
	chrt, err := loader.Load(dir)
	if err != nil {
		return nil, fmt.Errorf("load chart %s: %w", dir, err)
	}
	return chrt, nil
}

// helmTemplate renders the chart at dir with v, as `helm template
// shardlimiter dir --namespace shardlimiter -f … --set …` does. Values that
// the schema refuses or a template that fails are errors.
func helmTemplate(dir string, v chartValues) ([]byte, error) {
	chrt, err := loadChart(dir)
	if err != nil {
		return nil, err
	}
	vals, err := v.merge()
	if err != nil {
		return nil, err
	}
	inst := action.NewInstall(&action.Configuration{Log: func(string, ...any) {}})
	inst.DryRun, inst.DryRunOption = true, "true"
	inst.ClientOnly = true
	inst.Replace = true
	inst.ReleaseName = releaseName
	inst.Namespace = releaseNamespace
	inst.KubeVersion = &chartKubeVersion
	rel, err := inst.Run(chrt, vals)
	if err != nil {
		return nil, err
	}
	return []byte(rel.Manifest), nil
}

// chartSources are the sources rendered from the chart.
func chartSources() []source {
	var out []source
	for _, s := range sources {
		if s.chart != nil {
			out = append(out, s)
		}
	}
	return out
}

// TestChartLint runs `helm lint` on the chart with its defaults and with
// the values of each chart source; a warning fails the test as an error
// does (`helm lint --strict`).
func TestChartLint(t *testing.T) {
	t.Parallel()
	for _, src := range chartSources() {
		vals, err := src.chart.merge()
		if err != nil {
			t.Fatal(err)
		}
		linter := lint.AllWithKubeVersion(chartDir, vals, releaseNamespace, &chartKubeVersion)
		for _, m := range linter.Messages {
			if m.Severity >= support.WarningSev {
				t.Errorf("helm lint (%s): %s", src.name, m)
			} else {
				t.Logf("helm lint (%s): %s", src.name, m)
			}
		}
	}
}

// TestChartPackage packages the chart as `helm package` does and checks that
// the archive holds the whole chart: it renders as the directory does.
func TestChartPackage(t *testing.T) {
	t.Parallel()
	p := action.NewPackage()
	p.Destination = t.TempDir()
	archive, err := p.Run(chartDir, nil)
	if err != nil {
		t.Fatalf("helm package: %v", err)
	}
	dir, err := loadChart(chartDir)
	if err != nil {
		t.Fatal(err)
	}
	pkg, err := loadChart(archive)
	if err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf("%s-%s.tgz", dir.Name(), dir.Metadata.Version); filepath.Base(archive) != want {
		t.Errorf("helm package wrote %s, want %s", filepath.Base(archive), want)
	}
	if len(pkg.Schema) == 0 {
		t.Error("the package has no values.schema.json")
	}
	if len(pkg.Templates) != len(dir.Templates) || len(pkg.Files) != len(dir.Files) {
		t.Errorf("the package has %d templates and %d files, the directory %d and %d",
			len(pkg.Templates), len(pkg.Files), len(dir.Templates), len(dir.Files))
	}
	for _, src := range chartSources() {
		fromDir, err := helmTemplate(chartDir, *src.chart)
		if err != nil {
			t.Fatal(err)
		}
		fromPkg, err := helmTemplate(archive, *src.chart)
		if err != nil {
			t.Fatalf("helm template %s (%s): %v", filepath.Base(archive), src.name, err)
		}
		// A generated gossip key differs between two renderings.
		if !bytes.Equal(withoutGossipKeys(fromDir), withoutGossipKeys(fromPkg)) {
			t.Errorf("%s: the packaged chart renders differently from the directory", src.name)
		}
	}
}

var gossipKeysLine = regexp.MustCompile(`(?m)^  keys: \S+$`)

func withoutGossipKeys(b []byte) []byte { return gossipKeysLine.ReplaceAll(b, nil) }

// TestChartVersionFollowsBinary: the chart's version and appVersion are the
// binary's (`shardlimiter version`, cmd/shardlimiter/version.go).
func TestChartVersionFollowsBinary(t *testing.T) {
	bin := binary(t)
	out, err := exec.Command(bin, "version").Output()
	if err != nil {
		t.Fatalf("shardlimiter version: %v", err)
	}
	v, ok := strings.CutPrefix(strings.TrimSpace(string(out)), "shardlimiter ")
	if !ok {
		t.Fatalf("shardlimiter version printed %q, want \"shardlimiter X.Y.Z\"", out)
	}
	chrt, err := loadChart(chartDir)
	if err != nil {
		t.Fatal(err)
	}
	if chrt.Metadata.Version != v || chrt.Metadata.AppVersion != v {
		t.Errorf("Chart.yaml version %q, appVersion %q; want the binary's %q in both", chrt.Metadata.Version, chrt.Metadata.AppVersion, v)
	}
}

// TestChartSchemaRejects: values.schema.json makes a misspelled key, a value
// of the wrong type or out of range fail `helm template`, at any depth.
func TestChartSchemaRejects(t *testing.T) {
	t.Parallel()
	tests := []struct{ name, values string }{
		{"misspelled top-level key", "replica: 3"},
		{"misspelled nested key", "ports:\n  htpp: 8080"},
		{"misspelled deep key", "resources:\n  limit:\n    cpu: \"1\""},
		{"misspelled switch", "gossipKey:\n  enable: true"},
		{"misspelled in a list item", "imagePullSecrets:\n  - nmae: regcred"},
		{"string for integer", "ports:\n  http: \"8080\""},
		{"string for boolean", "serviceMonitor:\n  enabled: \"yes\""},
		{"list for map", "podLabels: [a, b]"},
		{"integer for label value", "podLabels:\n  team: 42"},
		{"port out of range", "ports:\n  grpc: 80810"},
		{"unknown mode", "mode: statefulset"},
		{"unknown fail policy", "config:\n  failPolicy: ignore"},
		{"not a Go duration", "config:\n  replicationInterval: 100"},
		{"not a variable of the binary", "config:\n  extraEnv:\n    MAX_KEYS: \"1\""},
		{"percentage PDB as a number", "pdb:\n  maxUnavailable: 1.5"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := filepath.Join(t.TempDir(), "values.yaml")
			if err := os.WriteFile(f, []byte(tt.values+"\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := helmTemplate(chartDir, chartValues{files: []string{f}})
			if err == nil {
				t.Fatalf("helm template -f <%q> succeeded, want a schema error", tt.values)
			}
			if !strings.Contains(err.Error(), "schema") {
				t.Errorf("helm template -f <%q> = %v, want a schema error", tt.values, err)
			}
		})
	}
}

// passThrough are the schema's objects left open on purpose: Kubernetes
// objects handed to the pod spec as they are (the API server checks them).
var passThrough = map[string]bool{
	"/affinity/nodeAffinity":    true,
	"/affinity/podAffinity":     true,
	"/affinity/podAntiAffinity": true,
	"/tolerations/items":        true,
}

// TestChartSchemaClosed: every object of values.schema.json refuses keys it
// does not list, or types the values of every key (a map of names), except
// the pass-through objects above; and every key of values.yaml is in it.
func TestChartSchemaClosed(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile(filepath.Join(chartDir, "values.schema.json"))
	if err != nil {
		t.Fatal(err)
	}
	var schema map[string]any
	if err := json.Unmarshal(b, &schema); err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	walkSchema(t, "", schema, seen)
	for p := range passThrough {
		if !seen[p] {
			t.Errorf("pass-through %s is not in the schema", p)
		}
	}
	chrt, err := loadChart(chartDir)
	if err != nil {
		t.Fatal(err)
	}
	checkValuesInSchema(t, "", chrt.Values, schema)
}

func walkSchema(t *testing.T, path string, node map[string]any, seen map[string]bool) {
	seen[path] = true
	if node["type"] == "object" {
		switch ap := node["additionalProperties"].(type) {
		case bool:
			if ap {
				t.Errorf("schema %s: additionalProperties true", cmpOrRoot(path))
			}
		case map[string]any:
			if ap["type"] == nil {
				t.Errorf("schema %s: additionalProperties without a type", cmpOrRoot(path))
			}
		default:
			if !passThrough[path] {
				t.Errorf("schema %s: an object without additionalProperties: a misspelled key would pass", cmpOrRoot(path))
			}
		}
	}
	if props, ok := node["properties"].(map[string]any); ok {
		for k, v := range props {
			walkSchema(t, path+"/"+k, v.(map[string]any), seen)
		}
	}
	if items, ok := node["items"].(map[string]any); ok {
		walkSchema(t, path+"/items", items, seen)
	}
	for _, alt := range []string{"anyOf", "oneOf", "allOf"} {
		if list, ok := node[alt].([]any); ok {
			for _, v := range list {
				walkSchema(t, path, v.(map[string]any), seen)
			}
		}
	}
}

func cmpOrRoot(path string) string {
	if path == "" {
		return "(root)"
	}
	return path
}

// checkValuesInSchema: each key of values.yaml has its own entry in the
// schema, so that it is documented there and not only accepted by a map.
func checkValuesInSchema(t *testing.T, path string, vals map[string]any, schema map[string]any) {
	props, _ := schema["properties"].(map[string]any)
	if props == nil {
		return // a map of names: its keys are the user's
	}
	for k, v := range vals {
		sub, ok := props[k].(map[string]any)
		if !ok {
			t.Errorf("values.yaml key %s/%s is not in values.schema.json", path, k)
			continue
		}
		if m, ok := v.(map[string]any); ok {
			checkValuesInSchema(t, path+"/"+k, m, sub)
		}
	}
}
