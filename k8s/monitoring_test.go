package manifests

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"
)

// The Prometheus Operator's PrometheusRule and PodMonitor
// (monitoring.coreos.com/v1), with only the fields the monitoring
// component uses; decoding is strict, so a misspelled field fails (checked
// against https://prometheus-operator.dev/docs/api-reference/api/).

type prometheusRule struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		Groups []ruleGroup `json:"groups"`
	} `json:"spec"`
}

type ruleGroup struct {
	Name  string `json:"name"`
	Rules []struct {
		Alert       string             `json:"alert,omitempty"`
		Record      string             `json:"record,omitempty"`
		Expr        intstr.IntOrString `json:"expr"`
		For         string             `json:"for,omitempty"`
		Labels      map[string]string  `json:"labels,omitempty"`
		Annotations map[string]string  `json:"annotations,omitempty"`
	} `json:"rules"`
}

type podMonitor struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		Selector            metav1.LabelSelector `json:"selector"`
		PodMetricsEndpoints []struct {
			Port     string `json:"port"`
			Path     string `json:"path,omitempty"`
			Interval string `json:"interval,omitempty"`
		} `json:"podMetricsEndpoints"`
	} `json:"spec"`
}

// TestMonitoringComponent renders the daemonset overlay with the
// monitoring component: its PrometheusRule holds exactly the alerts of
// deploy/prometheus/alerts.yaml, and its PodMonitor scrapes the limiter
// pods on their http port.
func TestMonitoringComponent(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	// kustomize takes no absolute paths: refer to the overlay from dir.
	abs := func(p string) string {
		a, err := filepath.Abs(p)
		if err != nil {
			t.Fatal(err)
		}
		rel, err := filepath.Rel(dir, a)
		if err != nil {
			t.Fatal(err)
		}
		return rel
	}
	if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(`apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
namespace: shardlimiter
resources:
  - `+abs("overlays/daemonset")+`
components:
  - `+abs("components/monitoring")+`
`), 0o600); err != nil {
		t.Fatal(err)
	}
	r := render(t, dir)
	if len(r.PrometheusRules) != 1 || len(r.PodMonitors) != 1 {
		t.Fatalf("rendered %d PrometheusRules and %d PodMonitors, want one each", len(r.PrometheusRules), len(r.PodMonitors))
	}
	src, err := os.ReadFile("../deploy/prometheus/alerts.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var want struct {
		Groups []ruleGroup `json:"groups"`
	}
	if err := yaml.UnmarshalStrict(src, &want); err != nil {
		t.Fatalf("deploy/prometheus/alerts.yaml: %v", err)
	}
	if got := r.PrometheusRules[0].Spec.Groups; !reflect.DeepEqual(got, want.Groups) || len(got) == 0 {
		t.Errorf("the PrometheusRule's groups differ from deploy/prometheus/alerts.yaml: run scripts/prometheusrule.sh")
	}
	pm := r.PodMonitors[0]
	if pm.Namespace != "shardlimiter" {
		t.Errorf("PodMonitor namespace = %q, want the limiter's", pm.Namespace)
	}
	pod := r.limiter(t)
	for k, v := range pm.Spec.Selector.MatchLabels {
		if pod.Template.Labels[k] != v {
			t.Errorf("PodMonitor selects %s=%s; the limiter pods have %q", k, v, pod.Template.Labels[k])
		}
	}
	if eps := pm.Spec.PodMetricsEndpoints; len(eps) != 1 || eps[0].Port != "http" || eps[0].Path != "/metrics" {
		t.Errorf("PodMonitor endpoints = %+v, want port http, /metrics", eps)
	}
	hasPort := false
	for _, p := range pod.Container.Ports {
		hasPort = hasPort || p.Name == "http"
	}
	if !hasPort {
		t.Error("the limiter container has no port named http")
	}
}
