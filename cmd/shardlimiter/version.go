package main

import (
	"fmt"
	"io"
)

// version is this build's release version. It is the one place the
// version is written: the Helm chart (deploy/helm/shardlimiter/Chart.yaml,
// version and appVersion) must carry the same, which k8s/chart_test.go
// checks against `shardlimiter version`. A release build may stamp another
// with -ldflags "-X main.version=…".
var version = "0.1.0"

// runVersion prints the version: `shardlimiter version`.
func runVersion(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 {
		fmt.Fprintf(stderr, "shardlimiter version: unexpected argument %q\n", args[0])
		return exitUsage
	}
	fmt.Fprintf(stdout, "shardlimiter %s\n", version)
	return exitOK
}
