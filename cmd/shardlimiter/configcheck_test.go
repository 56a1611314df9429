package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

const validRules = `domain: messaging
descriptors:
  - key: to_number
    rate_limits:
      - {unit: second, requests_per_unit: 1}
      - {unit: month, requests_per_unit: 100}
`

func writeRules(t *testing.T, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestConfigCheck(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	good := writeRules(t, dir, "good.yaml", validRules)
	other := writeRules(t, dir, "other.yaml", "domain: edge\n")
	// envoyproxy/ratelimit's example, with the metadata its token quotas
	// route on: accepted as it is.
	example := writeRules(t, t.TempDir(), "example.yaml", refExampleRules)
	bad := writeRules(t, dir, "bad.yaml", "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: fortnight\n      requests_per_unit: 1\n")
	tests := []struct {
		args           []string
		code           int
		stdout, stderr string // substrings
	}{
		{[]string{"config", "check", good}, exitOK, "ok: 1 domain (messaging), 1 rule, version ", ""},
		{[]string{"config", "check", example}, exitOK, "ok: 1 domain (rl), 11 rules", ""},
		{[]string{"config", "check", good, other}, exitOK, "ok: 2 domains (edge, messaging), 1 rule", ""},
		{[]string{"config", "check", good + "," + other}, exitOK, "ok: 2 domains", ""},
		{[]string{"config", "check", dir}, exitFail, "", `bad.yaml:5: unknown unit "fortnight"`},
		{[]string{"config", "check", good, bad}, exitFail, "", "shardlimiter config check: rules: " + bad + `:5: unknown unit "fortnight"`},
		{[]string{"config", "check", filepath.Join(dir, "none.yaml")}, exitFail, "", "none.yaml: stat: no such file"},
		{[]string{"config", "check"}, exitUsage, "", "usage: shardlimiter config check"},
		{[]string{"config", "lint", good}, exitUsage, "", "usage: shardlimiter config check"},
		{[]string{"config", "--help"}, exitOK, "usage: shardlimiter config check", ""},
	}
	for _, tt := range tests {
		var stdout, stderr bytes.Buffer
		code := run(context.Background(), tt.args, func(string) string { return "" }, &stdout, &stderr)
		if code != tt.code || !strings.Contains(stdout.String(), tt.stdout) || !strings.Contains(stderr.String(), tt.stderr) {
			t.Errorf("run(%q) = %d, stdout %q, stderr %q; want %d, %q, %q", tt.args, code, stdout.String(), stderr.String(), tt.code, tt.stdout, tt.stderr)
		}
		if strings.HasPrefix(tt.stdout, "ok:") && strings.Count(stdout.String(), "\n") != 1 {
			t.Errorf("run(%q): stdout %q is not one line", tt.args, stdout.String())
		}
	}
}

// TestConfigCheckBinary runs the built command once: exit status and the
// first error's file:line.
func TestConfigCheckBinary(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := buildBinary(t)
	dir := t.TempDir()
	bad := writeRules(t, dir, "config.yaml", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: day, requests_per_unit: 1}\n  - key: k\n")
	out, err := exec.Command(bin, "config", "check", bad).CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != exitFail || !strings.Contains(string(out), bad+`:5: duplicate descriptor key "k" (first on line 3)`) {
		t.Errorf("config check %s: %v, output %q", bad, err, out)
	}
	good := writeRules(t, dir, "good.yaml", validRules)
	if out, err := exec.Command(bin, "config", "check", good).CombinedOutput(); err != nil || !strings.HasPrefix(string(out), "ok: 1 domain (messaging)") {
		t.Errorf("config check %s: %v, output %q", good, err, out)
	}
}
