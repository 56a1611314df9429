package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// The monitoring material of deploy/: the Grafana dashboard, the alert
// rules and their promtool unit tests, and the runbook in
// docs/OPERATIONS.md.
const (
	dashboardFile  = "../../deploy/grafana/shardlimiter.json"
	alertsFile     = "../../deploy/prometheus/alerts.yaml"
	alertTestsFile = "../../deploy/prometheus/alerts_test.yaml"
	runbookFile    = "../../docs/OPERATIONS.md"
)

// dashboardQueries returns every query of the dashboard, by panel title.
func dashboardQueries(t *testing.T) map[string][]string {
	t.Helper()
	b, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	type panel struct {
		Title   string  `json:"title"`
		Panels  []panel `json:"panels"`
		Targets []struct {
			Expr string `json:"expr"`
		} `json:"targets"`
	}
	var d struct {
		Panels     []panel `json:"panels"`
		Templating struct {
			List []struct {
				Definition string `json:"definition"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	out := map[string][]string{}
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			for _, tg := range p.Targets {
				out[p.Title] = append(out[p.Title], tg.Expr)
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	for _, v := range d.Templating.List {
		if name, ok := strings.CutPrefix(v.Definition, "label_values("); ok {
			// label_values(metric, label): the metric is a query of its own.
			out["variable"] = append(out["variable"], strings.TrimSpace(strings.Split(name, ",")[0]))
		}
	}
	if len(out) < 20 {
		t.Fatalf("%s: only %d panels with queries", dashboardFile, len(out))
	}
	return out
}

type alertRule struct {
	Alert       string            `yaml:"alert"`
	Expr        string            `yaml:"expr"`
	Annotations map[string]string `yaml:"annotations"`
}

func alertRules(t *testing.T) []alertRule {
	t.Helper()
	b, err := os.ReadFile(alertsFile)
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Groups []struct {
			Rules []alertRule `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal(b, &f); err != nil {
		t.Fatalf("%s: %v", alertsFile, err)
	}
	var out []alertRule
	for _, g := range f.Groups {
		out = append(out, g.Rules...)
	}
	return out
}

var metricName = regexp.MustCompile(`\b(?:shardlimiter|process|go)_[a-z0-9_]+\b`)

// exportedFamilies scrapes a node (client TLS on, so that the certificate
// metrics exist; a state directory, so that the snapshot metrics do; a check decided and a descriptor of the rules file
// answered, so that the per-check and per-rule series exist) and returns
// its metric families and their types.
func exportedFamilies(t *testing.T) map[string]string {
	t.Helper()
	p := newPKI(t, "monitoring")
	dir := t.TempDir()
	rulesFile := filepath.Join(dir, "rules.yaml")
	writeFile(t, rulesFile, "domain: shop\ndescriptors:\n  - key: tenant\n    rate_limit: {unit: minute, requests_per_unit: 4}\n")
	s := serve(t, "--tls-cert-file", p.server.Cert, "--tls-key-file", p.server.Key, "--config", rulesFile, "--state-dir", filepath.Join(dir, "state")) // the snapshot metrics exist with a state directory
	client := httpsClient(p.client(t, nil))
	resp, err := client.Post("https://"+s.http+"/v1/GetRateLimits", "application/json",
		strings.NewReader(`{"requests":[{"name":"api","unique_key":"k","hits":1,"limit":5,"duration_ms":1000}]}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	resp, err = client.Post("https://"+s.http+"/json", "application/json", // the per-rule statistics of the rules
		strings.NewReader(`{"domain":"shop","descriptors":[{"entries":[{"key":"tenant","value":"acme"}]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	resp, err = client.Get("https://" + s.http + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	families := map[string]string{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) == 4 && f[0] == "#" && f[1] == "TYPE" {
			families[f[2]] = f[3]
		}
	}
	return families
}

// exported reports whether name is a series the node exports: a family,
// or a histogram's _bucket, _sum or _count.
func exported(families map[string]string, name string) bool {
	if _, ok := families[name]; ok {
		return true
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(name, suffix); ok && families[base] == "histogram" {
			return true
		}
	}
	return false
}

// TestMonitoringNamesExportedMetrics: every metric the dashboard and the
// alerts query is one a node exports (a renamed metric would leave a
// panel empty and an alert silent).
func TestMonitoringNamesExportedMetrics(t *testing.T) {
	t.Parallel()
	families := exportedFamilies(t)
	if len(families) < 30 {
		t.Fatalf("scraped only %d families", len(families))
	}
	for title, exprs := range dashboardQueries(t) {
		for _, e := range exprs {
			for _, name := range metricName.FindAllString(e, -1) {
				if !exported(families, name) {
					t.Errorf("dashboard panel %q queries %s, which the node does not export", title, name)
				}
			}
		}
	}
	for _, r := range alertRules(t) {
		names := metricName.FindAllString(r.Expr, -1)
		if len(names) == 0 {
			t.Errorf("alert %s queries no shardlimiter metric", r.Alert)
		}
		for _, name := range names {
			if !exported(families, name) {
				t.Errorf("alert %s queries %s, which the node does not export", r.Alert, name)
			}
		}
	}
}

// TestMonitoringRunbook: every alert links its section of
// docs/OPERATIONS.md, which exists, and has a promtool test case in which
// it fires, and cases in which it must not: one in a rolling restart and
// one in a crash healed by a replica (a test group whose comment names the
// situation), the two events an operator must not be paged for.
func TestMonitoringRunbook(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile(runbookFile)
	if err != nil {
		t.Fatal(err)
	}
	tests, err := os.ReadFile(alertTestsFile)
	if err != nil {
		t.Fatal(err)
	}
	var tf struct {
		Tests []struct {
			AlertRuleTest []struct {
				Alertname string `yaml:"alertname"`
				ExpAlerts []any  `yaml:"exp_alerts"`
			} `yaml:"alert_rule_test"`
		} `yaml:"tests"`
	}
	if err := yaml.Unmarshal(tests, &tf); err != nil {
		t.Fatal(err)
	}
	fires, silent := map[string]bool{}, map[string]bool{}
	for _, tc := range tf.Tests {
		for _, a := range tc.AlertRuleTest {
			if len(a.ExpAlerts) > 0 {
				fires[a.Alertname] = true
			} else {
				silent[a.Alertname] = true
			}
		}
	}
	situations := silentIn(t, tests, "rolling restart", "crash healed by a replica")
	rules := alertRules(t)
	if len(rules) < 9 {
		t.Fatalf("%s: %d alerts", alertsFile, len(rules))
	}
	for _, r := range rules {
		anchor := strings.ToLower(r.Alert)
		if !strings.HasSuffix(r.Annotations["runbook_url"], "docs/OPERATIONS.md#"+anchor) {
			t.Errorf("alert %s: runbook_url %q does not point at docs/OPERATIONS.md#%s", r.Alert, r.Annotations["runbook_url"], anchor)
		}
		if !slices.Contains(strings.Split(string(doc), "\n"), "### "+r.Alert) {
			t.Errorf("alert %s: no section \"### %s\" in docs/OPERATIONS.md", r.Alert, r.Alert)
		}
		if !fires[r.Alert] || !silent[r.Alert] {
			t.Errorf("alert %s: %s needs a case where it fires and one where it does not", r.Alert, alertTestsFile)
		}
		for situation, alerts := range situations {
			if !alerts[r.Alert] {
				t.Errorf("alert %s: %s has no case where it stays silent in a %s", r.Alert, alertTestsFile, situation)
			}
		}
	}
}

// silentIn returns, for each situation, the alerts evaluated silent
// (exp_alerts empty) in a test group of the promtool test file whose
// comment names the situation.
func silentIn(t *testing.T, file []byte, situations ...string) map[string]map[string]bool {
	t.Helper()
	var doc yaml.Node
	if err := yaml.Unmarshal(file, &doc); err != nil {
		t.Fatal(err)
	}
	out := map[string]map[string]bool{}
	for _, s := range situations {
		out[s] = map[string]bool{}
	}
	root := doc.Content[0]
	for i := 0; i+1 < len(root.Content); i += 2 {
		if root.Content[i].Value != "tests" {
			continue
		}
		for _, group := range root.Content[i+1].Content {
			comment := group.HeadComment
			if len(group.Content) > 0 {
				comment += group.Content[0].HeadComment
			}
			var g struct {
				AlertRuleTest []struct {
					Alertname string `yaml:"alertname"`
					ExpAlerts []any  `yaml:"exp_alerts"`
				} `yaml:"alert_rule_test"`
			}
			if err := group.Decode(&g); err != nil {
				t.Fatal(err)
			}
			for _, s := range situations {
				if !strings.Contains(strings.ReplaceAll(comment, "\n#", ""), s) {
					continue
				}
				for _, a := range g.AlertRuleTest {
					if len(a.ExpAlerts) == 0 {
						out[s][a.Alertname] = true
					}
				}
			}
		}
	}
	return out
}

// TestMonitoringRulesPromtool runs promtool: the alert rules load and
// pass their unit tests, and every dashboard query parses (as a recording
// rule of a rules file of its own).
func TestMonitoringRulesPromtool(t *testing.T) {
	t.Parallel()
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Skip("promtool not found: install it (Debian: apt-get install prometheus) to check the alert rules and dashboard queries")
	}
	run := func(args ...string) {
		t.Helper()
		out, err := exec.Command(promtool, args...).CombinedOutput()
		if err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	run("check", "rules", alertsFile)
	run("test", "rules", alertTestsFile)

	type rule struct {
		Record string `yaml:"record"`
		Expr   string `yaml:"expr"`
	}
	var recs []rule
	queries := dashboardQueries(t)
	titles := make([]string, 0, len(queries))
	for title := range queries {
		titles = append(titles, title)
	}
	slices.Sort(titles)
	grafana := strings.NewReplacer("$__rate_interval", "5m", "$__interval", "1m", "$job", ".+")
	for i, title := range titles {
		for j, e := range queries[title] {
			recs = append(recs, rule{Record: fmt.Sprintf("dashboard:panel_%d_%d", i, j), Expr: grafana.Replace(e)})
		}
	}
	b, err := yaml.Marshal(map[string]any{"groups": []any{map[string]any{"name": "dashboard", "rules": recs}}})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "dashboard_rules.yaml")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	run("check", "rules", path)
}
