package manifests

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

// renderChart renders the chart with --set expressions and decodes it.
func renderChart(t *testing.T, set ...string) (*rendered, error) {
	t.Helper()
	out, err := helmTemplate(chartDir, chartValues{set: set})
	if err != nil {
		return nil, err
	}
	r, err := decodeStrict(out)
	if err != nil {
		t.Fatalf("decode helm template --set %v: %v", set, err)
	}
	return r, nil
}

// TestChartPDB: the budget the chart renders for each mode is one
// Kubernetes can apply (pdbValidFor), and what the values ask for.
func TestChartPDB(t *testing.T) {
	t.Parallel()
	two := intstr.FromInt32(2)
	tests := []struct {
		set  []string
		kind string
		want *policySpec // nil: no budget
	}{
		{nil, "DaemonSet", nil},
		{[]string{"pdb.minAvailable=2"}, "DaemonSet", &policySpec{minAvailable: &two}},
		{[]string{"mode=deployment"}, "Deployment", &policySpec{maxUnavailable: ptr(intstr.FromInt32(1))}},
		{[]string{"mode=deployment", "pdb.maxUnavailable=25%"}, "Deployment", &policySpec{maxUnavailable: ptr(intstr.FromString("25%"))}},
		{[]string{"mode=deployment", "pdb.minAvailable=2"}, "Deployment", &policySpec{minAvailable: &two}},
		{[]string{"mode=deployment", "pdb.maxUnavailable=null"}, "Deployment", nil},
		{[]string{"mode=sidecar"}, "Deployment", &policySpec{maxUnavailable: ptr(intstr.FromInt32(1))}},
	}
	for _, tt := range tests {
		r, err := renderChart(t, tt.set...)
		if err != nil {
			t.Errorf("--set %v: %v", tt.set, err)
			continue
		}
		if tt.want == nil {
			if len(r.PDBs) != 0 {
				t.Errorf("--set %v: %d PodDisruptionBudgets, want none", tt.set, len(r.PDBs))
			}
			continue
		}
		if len(r.PDBs) != 1 {
			t.Errorf("--set %v: %d PodDisruptionBudgets, want 1", tt.set, len(r.PDBs))
			continue
		}
		pdb := r.PDBs[0]
		if err := pdbValidFor(pdb, tt.kind); err != nil {
			t.Errorf("--set %v: %v", tt.set, err)
		}
		if !sameIntOrString(pdb.Spec.MaxUnavailable, tt.want.maxUnavailable) || !sameIntOrString(pdb.Spec.MinAvailable, tt.want.minAvailable) {
			t.Errorf("--set %v: maxUnavailable %v, minAvailable %v; want %v, %v", tt.set,
				pdb.Spec.MaxUnavailable, pdb.Spec.MinAvailable, tt.want.maxUnavailable, tt.want.minAvailable)
		}
	}
	// A percentage cannot apply to DaemonSet pods: refused, not rendered.
	for _, v := range []string{"pdb.minAvailable=50%", "pdb.minAvailable=1.5"} {
		if _, err := renderChart(t, v); err == nil {
			t.Errorf("--set %s in daemonset mode rendered, want an error", v)
		}
	}
}

type policySpec struct{ maxUnavailable, minAvailable *intstr.IntOrString }

func ptr[T any](v T) *T { return &v }

func sameIntOrString(a, b *intstr.IntOrString) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.String() == b.String()
}

// TestChartGraceFollowsShutdown: the grace period is derived from the
// shutdown values, and the binary is given the same durations.
func TestChartGraceFollowsShutdown(t *testing.T) {
	t.Parallel()
	r, err := renderChart(t, "shutdown.preStopSleepSeconds=7", "shutdown.handoffTimeoutSeconds=30",
		"shutdown.shutdownGraceSeconds=11", "shutdown.marginSeconds=3")
	if err != nil {
		t.Fatal(err)
	}
	p := r.limiter(t)
	if got := p.Template.Spec.TerminationGracePeriodSeconds; got == nil || *got != 7+30+11+3 {
		t.Errorf("terminationGracePeriodSeconds = %v, want %d", deref(got), 7+30+11+3)
	}
	if got := p.Container.Lifecycle.PreStop.Sleep.Seconds; got != 7 {
		t.Errorf("preStop sleep = %d s, want 7", got)
	}
	if got := p.handoffTimeout(t); got != 30*time.Second {
		t.Errorf("handoff timeout = %v, want 30s", got)
	}
	if got := p.shutdownGrace(t); got != 11*time.Second {
		t.Errorf("shutdown grace = %v, want 11s", got)
	}
	checkGrace(t, r, p, overlayWant{})
}

// TestChartDeploymentSpread: in deployment mode the replicas spread over
// zones and nodes, and a DaemonSet (one pod a node) has no constraint.
func TestChartDeploymentSpread(t *testing.T) {
	t.Parallel()
	p := render(t, "chart/deployment").limiter(t)
	var keys []string
	for _, c := range p.Template.Spec.TopologySpreadConstraints {
		keys = append(keys, c.TopologyKey)
		if !selectsLabelSelector(t, c.LabelSelector, p.Template.Labels) {
			t.Errorf("topology spread on %s: selector %v does not select the pods", c.TopologyKey, c.LabelSelector)
		}
		if c.WhenUnsatisfiable != corev1.ScheduleAnyway {
			t.Errorf("topology spread on %s: %s, want ScheduleAnyway (a zone down must not block scheduling)", c.TopologyKey, c.WhenUnsatisfiable)
		}
	}
	if want := []string{"topology.kubernetes.io/zone", "kubernetes.io/hostname"}; !slices.Equal(keys, want) {
		t.Errorf("topology spread keys %v, want %v", keys, want)
	}
	if c := render(t, "chart/daemonset").limiter(t).Template.Spec.TopologySpreadConstraints; len(c) != 0 {
		t.Errorf("DaemonSet has topology spread constraints %v", c)
	}
}

// TestChartMonitoring: the ServiceMonitor scrapes the http port of the
// client Service (not the headless one, which would scrape every pod
// twice), over TLS with the API's CA and a client certificate some
// Certificate writes; the PrometheusRule carries files/alerts.yaml.
func TestChartMonitoring(t *testing.T) {
	t.Parallel()
	r := render(t, "chart/secure")
	if len(r.ServiceMonitors) != 1 || len(r.PrometheusRules) != 1 {
		t.Fatalf("%d ServiceMonitors and %d PrometheusRules, want 1 and 1", len(r.ServiceMonitors), len(r.PrometheusRules))
	}
	sm := r.ServiceMonitors[0]
	var scraped []*corev1.Service
	for _, svc := range r.Services {
		if selectsLabelSelector(t, &sm.Spec.Selector, svc.Labels) {
			scraped = append(scraped, svc)
		}
	}
	if len(scraped) != 1 || scraped[0].Spec.ClusterIP == corev1.ClusterIPNone {
		t.Fatalf("the ServiceMonitor selects Services %v, want the client Service alone", scraped)
	}
	p := r.limiter(t)
	secretOf := map[string]*certificate{}
	for _, c := range r.Certificates {
		secretOf[c.Spec.SecretName] = c
	}
	for _, ep := range sm.Spec.Endpoints {
		if ep.Path != "/metrics" || svcTarget(scraped[0], ep.Port).StrVal != "http" {
			t.Errorf("endpoint port %q path %q, want the Service port targeting http, /metrics", ep.Port, ep.Path)
		}
		tls := ep.TLSConfig
		if ep.Scheme != "https" || tls == nil || tls.CA == nil || tls.Cert == nil || tls.KeySecret == nil {
			t.Fatalf("endpoint scheme %q, tlsConfig %+v: want https with a CA and a client certificate (the API asks for one)", ep.Scheme, tls)
		}
		if tls.CA.Secret.Name != p.secretAt(t, p.Env["SHARDLIMITER_TLS_CLIENT_CA_FILE"]) {
			t.Errorf("tlsConfig CA from Secret %s, the API's CA from %s", tls.CA.Secret.Name, p.secretAt(t, p.Env["SHARDLIMITER_TLS_CLIENT_CA_FILE"]))
		}
		c := secretOf[tls.Cert.Secret.Name]
		if c == nil || tls.KeySecret.Name != c.Spec.SecretName || !slices.Contains(c.Spec.Usages, "client auth") {
			t.Errorf("client certificate from Secrets %s/%s: want one a Certificate with usage client auth writes", tls.Cert.Secret.Name, tls.KeySecret.Name)
		}
	}
	// The alerts select on the job the ServiceMonitor gives the samples:
	// the value of the Service's label jobLabel (else the Service's name).
	job := scraped[0].Name
	if sm.Spec.JobLabel != "" {
		job = scraped[0].Labels[sm.Spec.JobLabel]
	}
	want := readRuleFile(t, filepath.Join(chartDir, "files", "alerts.yaml"))
	for _, g := range want.Groups {
		for _, rule := range g.Rules {
			for _, m := range jobMatcher.FindAllStringSubmatch(rule.Expr, -1) {
				if m[1] != job {
					t.Errorf("alert %s selects job %q, the ServiceMonitor scrapes job %q", rule.Alert, m[1], job)
				}
			}
		}
	}
	if got := r.PrometheusRules[0].Spec; !slices.EqualFunc(got.Groups, want.Groups, func(a, b ruleGroup) bool {
		return a.Name == b.Name && len(a.Rules) == len(b.Rules)
	}) {
		t.Errorf("PrometheusRule groups %+v, want those of files/alerts.yaml %+v", got.Groups, want.Groups)
	}
}

var jobMatcher = regexp.MustCompile(`\bjob\s*=\s*"([^"]*)"`)

var promDuration = regexp.MustCompile(`^([0-9]+(ms|s|m|h|d|w|y))+$`)

// readRuleFile strictly decodes a Prometheus rule file and checks each rule
// has what Prometheus needs.
func readRuleFile(t *testing.T, path string) ruleFile {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	js, err := yaml.YAMLToJSONStrict(b)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	var f ruleFile
	if strict, err := kjson.UnmarshalStrict(js, &f, kjson.DisallowUnknownFields); err != nil || len(strict) > 0 {
		t.Fatalf("%s: %v %v", path, err, strict)
	}
	if len(f.Groups) == 0 {
		t.Fatalf("%s: no rule groups", path)
	}
	for _, g := range f.Groups {
		if g.Name == "" || len(g.Rules) == 0 {
			t.Errorf("%s: group %q has no name or no rules", path, g.Name)
		}
		for _, r := range g.Rules {
			if (r.Alert == "") == (r.Record == "") || strings.TrimSpace(r.Expr) == "" {
				t.Errorf("%s: rule %+v: want alert or record, and expr", path, r)
			}
			if r.For != "" && !promDuration.MatchString(r.For) {
				t.Errorf("%s: rule %s: for %q is not a Prometheus duration", path, r.Alert, r.For)
			}
		}
	}
	return f
}

// TestChartAlertsFollowRepository: the chart carries the repository's alert
// rules, deploy/prometheus/alerts.yaml, byte for byte, where that file
// exists (a chart cannot include files outside its directory).
func TestChartAlertsFollowRepository(t *testing.T) {
	t.Parallel()
	chartFile := filepath.Join(chartDir, "files", "alerts.yaml")
	readRuleFile(t, chartFile)
	repo, err := os.ReadFile(filepath.Join("..", "deploy", "prometheus", "alerts.yaml"))
	if os.IsNotExist(err) {
		t.Skip("deploy/prometheus/alerts.yaml is not in this tree: the chart's placeholder rules stand alone")
	}
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(chartFile)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != string(repo) {
		t.Errorf("%s differs from deploy/prometheus/alerts.yaml: copy it (cp deploy/prometheus/alerts.yaml %s)", chartFile, "deploy/helm/shardlimiter/files/alerts.yaml")
	}
}
