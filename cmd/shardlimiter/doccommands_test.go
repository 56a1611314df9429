package main

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/shardlimiter/shardlimiter/internal/poll"
)

// TestDocCommandsRun runs the commands the docs print, so that a printed
// command that does not run fails CI.
//
// The convention, for README.md and docs/*.md: a fenced code block tagged
// `sh` holds commands a reader may paste, as they are written (a block
// with no tag, or another tag, is an illustration, and is not run). In
// such a block:
//
//   - a line ending in a backslash continues on the next;
//   - when some line begins with "$ ", the block is a transcript: only
//     the "$ " lines are commands, the others their output;
//   - " # …" ends a line with a comment, and "| jq …" at the end only
//     formats the output: both are dropped;
//   - a command is one whose first words are `shardlimiter`, `curl` or
//     `go run`; other lines (builds, loops over addresses, scripts,
//     kubectl, helm, docker) are the reader's own steps, not run here.
//
// The commands run against a cluster of three real nodes that the test
// starts on 127.0.0.180-182 (ports bound :0, gossip on a probed free
// port), with the rules file docRules and gubernator's gateway. Addresses
// in the commands are the documented defaults of a node, rewritten to the
// test's: localhost, node and 127.0.0.2 name the first node, 127.0.0.3 and
// 127.0.0.4 the others; port 8080 is its HTTP API, 8081 and 1051 its gRPC
// port, 1050 its gubernator gateway. A command naming another address
// fails the test (it would need a mapping).
//
// How each command runs:
//
//   - `shardlimiter check|inspect|config|version …` (and `go run
//     ./cmd/shardlimiter` with those): the real binary; it must exit 0;
//   - `shardlimiter [flags]` that serves (and `go run ./cmd/shardlimiter`):
//     its flags are parsed by the binary's own parser, which must accept
//     them (a trailing "..." stands for the reader's other flags and is
//     dropped). It is not started: it would bind the fixed ports it names;
//   - `curl …`: curl (skipped when not installed), with --fail added, so
//     that an HTTP error fails the test.
//
// excludedCommands lists, with the reason, the commands that match the
// convention but cannot run here.
func TestDocCommandsRun(t *testing.T) {
	t.Parallel()
	cmds := docCommands(t)
	if len(cmds) < 15 {
		t.Fatalf("found %d commands in the docs: the extraction is broken", len(cmds))
	}
	bin := buildBinary(t)
	dir := t.TempDir()
	rulesFile := filepath.Join(dir, "rules.yaml")
	writeFile(t, rulesFile, docRules)
	hosts := []string{"127.0.0.180", "127.0.0.181", "127.0.0.182"}
	port := freeGossipPort(t, hosts...)
	join := strings.Join([]string{hosts[0] + ":" + fmt.Sprint(port)}, ",")
	var nodes []*proc
	for _, h := range hosts {
		nodes = append(nodes, startProc(t, bin, h, port, join, "--config", rulesFile, "--gubernator-http-addr", h+":0"))
	}
	poll.Until(t, 30*time.Second, func() bool {
		for _, p := range nodes {
			if len(members(p)) != len(nodes) {
				return false
			}
		}
		return true
	}, "3 nodes see each other")
	curl, curlErr := exec.LookPath("curl")

	ran := 0
	for _, c := range cmds {
		if why := excluded(c.text); why != "" {
			t.Logf("%s: not run (%s): %s", c.where, why, c.text)
			continue
		}
		words, err := shellWords(c.text)
		if err != nil {
			t.Errorf("%s: the command cannot be read: %v", c.where, err)
			continue
		}
		words, err = mapAddresses(words, nodes)
		if err != nil {
			t.Errorf("%s: %v: %s", c.where, err, c.text)
			continue
		}
		if words[0] == "go" { // go run ./cmd/shardlimiter …
			if len(words) < 3 || words[2] != "./cmd/shardlimiter" {
				t.Errorf("%s: go run of something else than ./cmd/shardlimiter: list it in excludedCommands with a reason: %s", c.where, c.text)
				continue
			}
			words = append([]string{"shardlimiter"}, words[3:]...)
		}
		switch {
		case words[0] == "curl":
			if curlErr != nil {
				t.Logf("%s: curl not installed, not run: %s", c.where, c.text)
				continue
			}
			out, err := exec.Command(curl, append(words[1:], "--fail", "--max-time", "10")...).CombinedOutput()
			if err != nil {
				t.Errorf("%s: %s\n(ran as %q): %v\n%s", c.where, c.text, words, err, out)
			}
		case len(words) > 1 && isSubcommand(words[1]):
			cmd := exec.Command(bin, words[1:]...)
			cmd.Dir = dir
			cmd.Env = append(os.Environ(), "SHARDLIMITER_SERVER=") // as printed: no server from the environment
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Errorf("%s: %s\n(ran as %q): %v\n%s", c.where, c.text, words, err, out)
			}
		default: // a node that serves: its flags must parse
			args := words[1:]
			if len(args) > 0 && args[len(args)-1] == "..." {
				args = args[:len(args)-1]
			}
			if _, err := parseConfig(args, env(), io.Discard); err != nil {
				t.Errorf("%s: %s: its flags do not parse: %v", c.where, c.text, err)
			}
		}
		ran++
	}
	t.Logf("%d commands of the docs ran", ran)
}

// excludedCommands are commands that match the convention but need what
// the test does not have, by their beginning, with the reason.
var excludedCommands = []struct{ prefix, why string }{
	{"go run ./loadtest", "a load run with clusters of its own, seconds to minutes each; loadtest's own tests run its modes"},
	{"go run ./cmd/simulate", "simulations of clusters of up to hundreds of members, minutes each; sim's own tests run small ones"},
	{"shardlimiter config check /etc/", "a rules directory on the reader's machine"},
}

func excluded(cmd string) string {
	for _, e := range excludedCommands {
		if strings.HasPrefix(cmd, e.prefix) {
			return e.why
		}
	}
	return ""
}

func isSubcommand(w string) bool {
	switch w {
	case "check", "inspect", "config", "version":
		return true
	}
	return false
}

// docRules are the rules the docs' examples assume: the shop domain of
// docs/OPERATIONS.md (a per_tenant rule, with a path under it) and the edge
// domain of README.md and docs/ENVOY.md.
const docRules = `domain: shop
descriptors:
  - key: tenant
    rate_limit: {name: per_tenant, unit: minute, requests_per_unit: 100}
    descriptors:
      - key: path
        value: /checkout
        rate_limit: {unit: minute, requests_per_unit: 10}
---
domain: edge
descriptors:
  - key: remote_address
    rate_limit: {unit: second, requests_per_unit: 100}
`

// docAddr matches an address of a node in the docs.
var docAddr = regexp.MustCompile(`\b(localhost|node|127\.0\.0\.[0-9]+|[a-z0-9.-]+\.[a-z]{2,}|[0-9]+\.[0-9]+\.[0-9]+\.[0-9]+):([0-9]+)\b`)

// mapAddresses rewrites the node addresses in words to the test
// cluster's (see TestDocCommandsRun).
func mapAddresses(words []string, nodes []*proc) ([]string, error) {
	hostIndex := map[string]int{"localhost": 0, "node": 0, "127.0.0.2": 0, "127.0.0.3": 1, "127.0.0.4": 2}
	out := make([]string, len(words))
	var bad error
	for i, w := range words {
		out[i] = docAddr.ReplaceAllStringFunc(w, func(a string) string {
			m := docAddr.FindStringSubmatch(a)
			n, ok := hostIndex[m[1]]
			if !ok {
				bad = fmt.Errorf("address %s names no node of the test cluster", a)
				return a
			}
			p := nodes[n]
			switch m[2] {
			case "8080":
				return p.http
			case "8081", "1051":
				return p.grpc
			case "1050":
				return p.gubernatorHTTP
			}
			bad = fmt.Errorf("port %s of %s is not a node's documented port", m[2], a)
			return a
		})
	}
	return out, bad
}

// docCommand is one command of the docs, where it is written.
type docCommand struct {
	where string // file:line
	text  string
}

// docCommands extracts the commands of README.md and docs/*.md by the
// convention of TestDocCommandsRun.
func docCommands(t *testing.T) []docCommand {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(repoRoot, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	files = append([]string{filepath.Join(repoRoot, "README.md")}, files...)
	var out []docCommand
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range shBlocks(string(data)) {
			for _, c := range blockCommands(b.lines) {
				out = append(out, docCommand{where: fmt.Sprintf("%s:%d", rel(f), b.line+c.line), text: c.text})
			}
		}
	}
	return out
}

type block struct {
	line  int // of the first line inside the fence, 1-based
	lines []string
}

var fence = regexp.MustCompile("^(\\s*)```(\\S*)\\s*$")

// shBlocks returns the fenced blocks tagged sh of a Markdown text, their
// lines unindented by the fence's indentation.
func shBlocks(md string) []block {
	lines := strings.Split(md, "\n")
	var out []block
	for i := 0; i < len(lines); i++ {
		m := fence.FindStringSubmatch(lines[i])
		if m == nil {
			continue
		}
		j := i + 1
		for j < len(lines) && strings.TrimSpace(lines[j]) != "```" {
			j++
		}
		if m[2] == "sh" {
			b := block{line: i + 2}
			for _, l := range lines[i+1 : min(j, len(lines))] {
				b.lines = append(b.lines, strings.TrimPrefix(l, m[1]))
			}
			out = append(out, b)
		}
		i = j
	}
	return out
}

// blockCommands returns the commands of one sh block, with their line
// within it (0-based).
func blockCommands(lines []string) []struct {
	line int
	text string
} {
	transcript := false
	for _, l := range lines {
		transcript = transcript || strings.HasPrefix(l, "$ ")
	}
	var out []struct {
		line int
		text string
	}
	for i := 0; i < len(lines); i++ {
		start, l := i, lines[i]
		if transcript {
			var ok bool
			if l, ok = strings.CutPrefix(l, "$ "); !ok {
				continue
			}
		}
		for i+1 < len(lines) && (strings.HasSuffix(l, "\\") || openQuote(l)) {
			i++
			l += "\n" + lines[i] // shellWords drops a backslash-newline
		}
		l = strings.TrimSpace(dropComment(l))
		if i, ok := pipeToJQ(l); ok {
			l = strings.TrimSpace(l[:i])
		}
		if strings.HasPrefix(l, "shardlimiter") || strings.HasPrefix(l, "curl ") || strings.HasPrefix(l, "go run ") {
			out = append(out, struct {
				line int
				text string
			}{start, l})
		}
	}
	return out
}

// dropComment cuts a " # comment" outside quotes.
func dropComment(l string) string {
	var q byte
	for i := 0; i < len(l); i++ {
		switch c := l[i]; {
		case q != 0:
			if c == q {
				q = 0
			}
		case c == '\'' || c == '"':
			q = c
		case c == '\n':
			return l // a comment on a line continued: kept (shellWords refuses it)
		case c == '#' && i > 0 && (l[i-1] == ' ' || l[i-1] == '\t'):
			return strings.TrimRight(l[:i], " \t")
		}
	}
	return l
}

// pipeToJQ finds a final "| jq …" outside quotes.
func pipeToJQ(l string) (int, bool) {
	var q byte
	for i := 0; i < len(l); i++ {
		switch c := l[i]; {
		case q != 0:
			if c == q {
				q = 0
			}
		case c == '\'' || c == '"':
			q = c
		case c == '|' && strings.HasPrefix(strings.TrimSpace(l[i+1:]), "jq"):
			return i, true
		}
	}
	return 0, false
}

// openQuote reports whether l ends inside a quoted string: the command
// goes on on the next line, as in a shell.
func openQuote(l string) bool {
	var q byte
	for i := 0; i < len(l); i++ {
		switch c := l[i]; {
		case q != 0:
			if c == q {
				q = 0
			}
		case c == '\\':
			i++
		case c == '\'' || c == '"':
			q = c
		}
	}
	return q != 0
}
