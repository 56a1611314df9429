package manifests

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"strings"
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

// overlays are the deployable kustomizations, relative to this directory.
var overlays = []string{"overlays/daemonset", "overlays/sidecar", "overlays/secure"}

// rendered is one overlay's output, decoded into typed objects.
type rendered struct {
	Namespaces      []*corev1.Namespace
	ServiceAccounts []*corev1.ServiceAccount
	ConfigMaps      []*corev1.ConfigMap
	Services        []*corev1.Service
	PDBs            []*policyv1.PodDisruptionBudget
	NetworkPolicies []*networkingv1.NetworkPolicy
	DaemonSets      []*appsv1.DaemonSet
	Deployments     []*appsv1.Deployment
	Certificates    []*certificate
	Issuers         []*issuer
	PrometheusRules []*prometheusRule // components/monitoring
	PodMonitors     []*podMonitor
}

// kustomize renders dir with `kubectl kustomize`. It skips the test when
// kubectl is not installed and fails it when the build fails.
func kustomize(t *testing.T, dir string) []byte {
	t.Helper()
	if _, err := exec.LookPath("kubectl"); err != nil {
		t.Skip("kubectl not on PATH: cannot render the kustomizations")
	}
	var stderr bytes.Buffer
	cmd := exec.Command("kubectl", "kustomize", dir)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("kubectl kustomize %s: %v\n%s", dir, err, stderr.Bytes())
	}
	return out
}

// render renders and strictly decodes one overlay.
func render(t *testing.T, dir string) *rendered {
	t.Helper()
	r, err := decodeStrict(kustomize(t, dir))
	if err != nil {
		t.Fatalf("decode %s: %v", dir, err)
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
	case "monitoring.coreos.com/v1/PrometheusRule":
		o := &prometheusRule{}
		r.PrometheusRules, obj = append(r.PrometheusRules, o), o
	case "monitoring.coreos.com/v1/PodMonitor":
		o := &podMonitor{}
		r.PodMonitors, obj = append(r.PodMonitors, o), o
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
	return nil
}

func TestOverlaysDecodeStrictly(t *testing.T) {
	for _, dir := range overlays {
		t.Run(dir, func(t *testing.T) {
			t.Parallel()
			r := render(t, dir)
			if n := len(r.DaemonSets) + len(r.Deployments); n == 0 {
				t.Errorf("%s renders no DaemonSet or Deployment", dir)
			}
			for kind, n := range map[string]int{
				"ConfigMap":           len(r.ConfigMaps),
				"Service":             len(r.Services),
				"PodDisruptionBudget": len(r.PDBs),
				"NetworkPolicy":       len(r.NetworkPolicies),
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
