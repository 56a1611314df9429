package main

import (
	"bytes"
	"context"
	"regexp"
	"testing"
)

func TestVersionCommand(t *testing.T) {
	t.Parallel()
	var stdout, stderr bytes.Buffer
	if code := run(context.Background(), []string{"version"}, func(string) string { return "" }, &stdout, &stderr); code != exitOK {
		t.Fatalf("shardlimiter version = exit %d, stderr %q; want %d", code, stderr.String(), exitOK)
	}
	// Semantic versioning, as Helm requires of a chart's version.
	if got, want := stdout.String(), "shardlimiter "+version+"\n"; got != want ||
		!regexp.MustCompile(`^\d+\.\d+\.\d+(-[0-9A-Za-z.-]+)?$`).MatchString(version) {
		t.Errorf("shardlimiter version printed %q, want %q with a semantic version", got, want)
	}
	stdout.Reset()
	if code := run(context.Background(), []string{"version", "extra"}, func(string) string { return "" }, &stdout, &stderr); code != exitUsage {
		t.Errorf("shardlimiter version extra = exit %d, want %d", code, exitUsage)
	}
}
