package manifests

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

// source is one rendering under test: a kustomize overlay, or the Helm
// chart with a set of values. Every check of the manifests runs on each.
type source struct {
	name string
	want overlayWant
	// dir is the kustomization (kustomize) or the chart (Helm).
	dir string
	// chart is set for the Helm chart: its values.
	chart *chartValues
	// extra are manifests applied beside the chart's: the sidecar
	// example's application, which embeds the limiter container.
	extra []string
}

// sources are the deployable kustomizations and the chart in each mode,
// relative to this directory.
var sources = []source{
	{name: "overlays/daemonset", dir: "overlays/daemonset", want: overlayWant{kind: "DaemonSet", localTraffic: true}},
	{name: "overlays/sidecar", dir: "overlays/sidecar", want: overlayWant{kind: "Deployment", nativeSidecar: true}},
	{name: "overlays/secure", dir: "overlays/secure", want: overlayWant{kind: "DaemonSet", localTraffic: true, secure: true}},
	{name: "overlays/durable", dir: "overlays/durable", want: overlayWant{kind: "DaemonSet", localTraffic: true}},
	{name: "chart/daemonset", dir: chartDir, chart: &chartValues{},
		want: overlayWant{kind: "DaemonSet", localTraffic: true}},
	{name: "chart/deployment", dir: chartDir, chart: &chartValues{files: []string{chartDir + "/examples/deployment-values.yaml"}},
		want: overlayWant{kind: "Deployment", spread: true}},
	{name: "chart/secure", dir: chartDir, chart: &chartValues{
		files: []string{chartDir + "/examples/secure-values.yaml"},
		set:   []string{"serviceMonitor.enabled=true", "prometheusRule.enabled=true"}},
		want: overlayWant{kind: "DaemonSet", localTraffic: true, secure: true, monitoring: true}},
	{name: "chart/sidecar", dir: chartDir, chart: &chartValues{files: []string{chartDir + "/examples/sidecar-values.yaml"}},
		extra: []string{chartDir + "/examples/sidecar-app.yaml"},
		want:  overlayWant{kind: "Deployment", nativeSidecar: true}},
}

func sourceNamed(t *testing.T, name string) source {
	t.Helper()
	for _, s := range sources {
		if s.name == name {
			return s
		}
	}
	t.Fatalf("no source %q", name)
	return source{}
}

// rendered is one source's output, decoded into typed objects.
type rendered struct {
	Namespaces      []*corev1.Namespace
	ServiceAccounts []*corev1.ServiceAccount
	ConfigMaps      []*corev1.ConfigMap
	Secrets         []*corev1.Secret
	Services        []*corev1.Service
	PDBs            []*policyv1.PodDisruptionBudget
	NetworkPolicies []*networkingv1.NetworkPolicy
	DaemonSets      []*appsv1.DaemonSet
	Deployments     []*appsv1.Deployment
	Certificates    []*certificate
	Issuers         []*issuer
	ServiceMonitors []*serviceMonitor
	PrometheusRules []*prometheusRule
	// objects are all of the above, in the stream's order.
	objects []metav1.Object
}

// errNoKubectl skips the tests of the overlays where kubectl is missing.
var errNoKubectl = errors.New("kubectl not on PATH: cannot render the kustomizations")

// kustomize renders dir with `kubectl kustomize`.
func kustomize(dir string) ([]byte, error) {
	if _, err := exec.LookPath("kubectl"); err != nil {
		return nil, errNoKubectl
	}
	var stderr bytes.Buffer
	cmd := exec.Command("kubectl", "kustomize", dir)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("kubectl kustomize %s: %v\n%s", dir, err, stderr.Bytes())
	}
	return out, nil
}

// renderCache keeps each source's output: several tests check the same one.
var renderCache sync.Map // source name → *cachedRender

type cachedRender struct {
	once sync.Once
	out  []byte
	err  error
}

// output renders s once per test binary: kustomize for an overlay, the
// Helm SDK for the chart (then its extra manifests).
func (s source) output(t *testing.T) []byte {
	t.Helper()
	v, _ := renderCache.LoadOrStore(s.name, &cachedRender{})
	c := v.(*cachedRender)
	c.once.Do(func() {
		if s.chart == nil {
			c.out, c.err = kustomize(s.dir)
			return
		}
		c.out, c.err = helmTemplate(s.dir, *s.chart)
		for _, f := range s.extra {
			if c.err != nil {
				return
			}
			var b []byte
			b, c.err = os.ReadFile(f)
			c.out = append(append(c.out, "\n---\n"...), b...)
		}
	})
	if errors.Is(c.err, errNoKubectl) {
		t.Skip(c.err)
	}
	if c.err != nil {
		t.Fatalf("render %s: %v", s.name, c.err)
	}
	return c.out
}

// render renders and strictly decodes one source. Objects without a
// namespace in the chart's renderings (its extra manifests, applied with
// `kubectl -n`) get the release's.
func render(t *testing.T, name string) *rendered {
	t.Helper()
	s := sourceNamed(t, name)
	r, err := decodeStrict(s.output(t))
	if err != nil {
		t.Fatalf("decode %s: %v", name, err)
	}
	if s.chart != nil {
		r.defaultNamespace(releaseNamespace)
	}
	return r
}

// decodeStrict decodes a multi-document YAML stream into typed objects. Like
// the API server, it rejects unknown fields, fields spelled with another case,
// duplicate keys, values of the wrong type, and kinds it does not know.
func decodeStrict(stream []byte) (*rendered, error) {
	r := &rendered{}
	reader := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(stream)))
	for i := 0; ; i++ {
		doc, err := reader.Read()
		if errors.Is(err, io.EOF) {
			return r, nil
		}
		if err != nil {
			return nil, fmt.Errorf("document %d: %w", i, err)
		}
		if len(bytes.TrimSpace(doc)) == 0 {
			continue
		}
		if err := r.add(doc); err != nil {
			return nil, fmt.Errorf("document %d: %w", i, err)
		}
	}
}

// add decodes one document into the typed object its apiVersion and kind
// name and appends it to r.
func (r *rendered) add(doc []byte) error {
	js, err := yaml.YAMLToJSONStrict(doc)
	if err != nil {
		return err
	}
	var tm metav1.TypeMeta
	if err := kjson.UnmarshalCaseSensitivePreserveInts(js, &tm); err != nil {
		return err
	}
	var obj any
	switch tm.APIVersion + "/" + tm.Kind {
	case "v1/Namespace":
		o := &corev1.Namespace{}
		r.Namespaces, obj = append(r.Namespaces, o), o
	case "v1/ServiceAccount":
		o := &corev1.ServiceAccount{}
		r.ServiceAccounts, obj = append(r.ServiceAccounts, o), o
	case "v1/ConfigMap":
		o := &corev1.ConfigMap{}
		r.ConfigMaps, obj = append(r.ConfigMaps, o), o
	case "v1/Secret":
		o := &corev1.Secret{}
		r.Secrets, obj = append(r.Secrets, o), o
	case "v1/Service":
		o := &corev1.Service{}
		r.Services, obj = append(r.Services, o), o
	case "policy/v1/PodDisruptionBudget":
		o := &policyv1.PodDisruptionBudget{}
		r.PDBs, obj = append(r.PDBs, o), o
	case "networking.k8s.io/v1/NetworkPolicy":
		o := &networkingv1.NetworkPolicy{}
		r.NetworkPolicies, obj = append(r.NetworkPolicies, o), o
	case "apps/v1/DaemonSet":
		o := &appsv1.DaemonSet{}
		r.DaemonSets, obj = append(r.DaemonSets, o), o
	case "apps/v1/Deployment":
		o := &appsv1.Deployment{}
		r.Deployments, obj = append(r.Deployments, o), o
	case "cert-manager.io/v1/Certificate":
		o := &certificate{}
		r.Certificates, obj = append(r.Certificates, o), o
	case "cert-manager.io/v1/Issuer":
		o := &issuer{}
		r.Issuers, obj = append(r.Issuers, o), o
	case "monitoring.coreos.com/v1/ServiceMonitor":
		o := &serviceMonitor{}
		r.ServiceMonitors, obj = append(r.ServiceMonitors, o), o
	case "monitoring.coreos.com/v1/PrometheusRule":
		o := &prometheusRule{}
		r.PrometheusRules, obj = append(r.PrometheusRules, o), o
	default:
		return fmt.Errorf("unexpected apiVersion %q kind %q", tm.APIVersion, tm.Kind)
	}
	strictErrs, err := kjson.UnmarshalStrict(js, obj, kjson.DisallowDuplicateFields, kjson.DisallowUnknownFields)
	if err != nil {
		return fmt.Errorf("%s: %w", tm.Kind, err)
	}
	if len(strictErrs) > 0 {
		return fmt.Errorf("%s: %w", tm.Kind, errors.Join(strictErrs...))
	}
	r.objects = append(r.objects, obj.(metav1.Object))
	return nil
}

// defaultNamespace puts every namespaced object without a namespace into ns.
func (r *rendered) defaultNamespace(ns string) {
	for _, o := range r.objects {
		if _, cluster := o.(*corev1.Namespace); !cluster && o.GetNamespace() == "" {
			o.SetNamespace(ns)
		}
	}
}

func TestSourcesDecodeStrictly(t *testing.T) {
	for _, src := range sources {
		dir := src.name
		t.Run(dir, func(t *testing.T) {
			t.Parallel()
			r := render(t, dir)
			if n := len(r.DaemonSets) + len(r.Deployments); n == 0 {
				t.Errorf("%s renders no DaemonSet or Deployment", dir)
			}
			for kind, n := range map[string]int{
				"ConfigMap":     len(r.ConfigMaps),
				"Service":       len(r.Services),
				"NetworkPolicy": len(r.NetworkPolicies),
			} {
				if n == 0 {
					t.Errorf("%s renders no %s", dir, kind)
				}
			}
		})
	}
}

// TestDecodeStrictRejects proves that decodeStrict is strict: each manifest
// differs from a valid one by a single mistake the API server would reject.
func TestDecodeStrictRejects(t *testing.T) {
	const valid = `apiVersion: v1
kind: Service
metadata:
  name: ok
spec:
  selector:
    app: x
  ports:
    - name: grpc
      port: 8081
`
	if _, err := decodeStrict([]byte(valid)); err != nil {
		t.Fatalf("decodeStrict(valid) = %v, want nil", err)
	}
	tests := []struct {
		name, from, to string
	}{
		{"misspelled field", "      port: 8081", "      prot: 8081"},
		{"field in other case", "      port: 8081", "      Port: 8081"},
		{"misplaced field", "  selector:", "  podSelector:"},
		{"wrong type", "      port: 8081", "      port: [8081]"},
		{"string for integer", "      port: 8081", `      port: "8081"`},
		{"duplicate key", "    app: x", "    app: x\n    app: y"},
		{"unknown kind", "kind: Service", "kind: Servise"},
		{"unknown version", "apiVersion: v1", "apiVersion: v2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			doc := strings.Replace(valid, tt.from, tt.to, 1)
			if doc == valid {
				t.Fatalf("test case does not change the manifest")
			}
			// A valid document before the broken one: the error must not
			// depend on the broken one being first.
			stream := valid + "---\n" + doc
			if _, err := decodeStrict([]byte(stream)); err == nil {
				t.Errorf("decodeStrict(%q) = nil error, want an error", doc)
			} else {
				t.Logf("rejected: %v", err)
			}
		})
	}
}
