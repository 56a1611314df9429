package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/shardlimiter/shardlimiter/rules"
)

// runConfig is `shardlimiter config check FILE|DIR…`: it validates rules
// files offline, as the server would load them with --config (whose
// comma-separated form it takes too). Valid: one
// summary line on stdout, exit 0. Invalid: the first error, with its file
// and line, on stderr, exit 1. Usage errors exit 2.
func runConfig(args []string, stdout, stderr io.Writer) int {
	const usage = "usage: shardlimiter config check FILE|DIR...\n" +
		"  validates rules files (envoyproxy/ratelimit's YAML, docs/RULES.md) without a server\n"
	if len(args) > 0 && (args[0] == "-h" || args[0] == "--help" || args[0] == "help") {
		fmt.Fprint(stdout, usage)
		return exitOK
	}
	if len(args) < 2 || args[0] != "check" {
		fmt.Fprint(stderr, usage)
		return exitUsage
	}
	var paths []string
	for _, a := range args[1:] {
		// Also the comma-separated list of --config.
		for p := range strings.SplitSeq(a, ",") {
			if p != "" {
				paths = append(paths, p)
			}
		}
	}
	set, err := rules.Load(paths...)
	if err != nil {
		fmt.Fprintf(stderr, "shardlimiter config check: %v\n", err)
		return exitFail
	}
	fmt.Fprintf(stdout, "ok: %s (%s), %s, version %s\n", plural(len(set.Domains()), "domain"),
		strings.Join(set.Domains(), ", "), plural(set.Len(), "rule"), set.Version())
	return exitOK
}

func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}
