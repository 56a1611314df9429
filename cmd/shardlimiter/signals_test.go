package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"path/filepath"
	"strings"
	"testing"
)

// TestVersionFlag: --version (and -version) answer as the version
// subcommand does.
func TestVersionFlag(t *testing.T) {
	t.Parallel()
	var want bytes.Buffer
	run(context.Background(), []string{"version"}, env(), &want, io.Discard)
	for _, arg := range []string{"--version", "-version"} {
		var stdout, stderr bytes.Buffer
		if code := run(context.Background(), []string{arg}, env(), &stdout, &stderr); code != exitOK || stdout.String() != want.String() {
			t.Errorf("shardlimiter %s = exit %d, %q (stderr %q); want exit 0, %q", arg, code, stdout.String(), stderr.String(), want.String())
		}
	}
}

// TestJSONLogKeepsStdoutJSON: with --log-format json, the line that says
// the node serves (with its bound addresses) is JSON too, and names them.
func TestJSONLogKeepsStdoutJSON(t *testing.T) {
	t.Parallel()
	args := []string{"--http-addr", "127.0.0.1:0", "--grpc-addr", "127.0.0.1:0", "--peer-addr", "127.0.0.1:0", "--gossip-addr", "127.0.0.1:0", "--log-level", "warn", "--log-format", "json"}
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	exit := make(chan int, 1)
	go func() {
		exit <- run(ctx, args, env(), pw, io.Discard)
		pw.Close()
	}()
	r := bufio.NewReader(pr)
	first, err := r.ReadString('\n')
	if err != nil {
		t.Fatalf("no serving line: %v", err)
	}
	cancel()
	rest, _ := io.ReadAll(r)
	if code := <-exit; code != exitOK {
		t.Errorf("exit %d", code)
	}
	var line struct {
		Msg, Node, HTTP, GRPC, Peer string
	}
	if err := json.Unmarshal([]byte(first), &line); err != nil || line.Msg != "serving" || line.HTTP == "" || line.GRPC == "" || line.Peer == "" || line.Node == "" {
		t.Errorf("serving line with --log-format json = %q (%v), want JSON with msg serving, node, http, grpc, peer", first, err)
	}
	for _, l := range strings.Split(strings.TrimSpace(string(rest)), "\n") {
		if l != "" && !json.Valid([]byte(l)) {
			t.Errorf("stdout line is not JSON: %q", l)
		}
	}
}

// TestCLINamesTheNodeOneWay: every subcommand takes -server as the node's
// HTTP API URL (and check and inspect key its gRPC address too); the
// inspect key command that inspect match prints runs as printed; and
// check takes a rule of the rules file by name, as the API does.
func TestCLINamesTheNodeOneWay(t *testing.T) {
	t.Parallel()
	rulesFile := filepath.Join(t.TempDir(), "rules.yaml")
	writeFile(t, rulesFile, `
domain: shop
descriptors:
  - key: tenant
    rate_limit: {name: per_tenant, unit: minute, requests_per_unit: 4}
`)
	s := serve(t, "--config", rulesFile)
	base := "http://" + s.http
	cli := func(getenv func(string) string, args ...string) (int, string) {
		var o, e bytes.Buffer
		code := run(context.Background(), args, getenv, &o, &e)
		return code, o.String() + e.String()
	}

	code, text := cli(env(), "inspect", "match", "-server", base, "-domain", "shop", "-descriptor", "tenant=acme")
	if code != exitOK {
		t.Fatalf("inspect match -server %s: exit %d\n%s", base, code, text)
	}
	var printed string
	for _, l := range strings.Split(text, "\n") {
		if _, cmd, ok := strings.Cut(l, "inspect    "); ok {
			printed = cmd
		}
	}
	words, err := shellWords(printed)
	if err != nil || len(words) < 3 || words[0] != "shardlimiter" {
		t.Fatalf("inspect match printed no command line (%v):\n%s", err, text)
	}
	if code, out := cli(env(), words[1:]...); code != exitOK || !strings.Contains(out, "4 of 4 left") {
		t.Errorf("the printed command %q: exit %d\n%s", printed, code, out)
	}
	// The former spelling, and the environment variable.
	if code, out := cli(env(), "inspect", "match", "-http", base, "-domain", "shop", "-descriptor", "tenant=acme"); code != exitOK {
		t.Errorf("inspect match -http: exit %d\n%s", code, out)
	}
	viaEnv := env("SHARDLIMITER_SERVER", base)
	if code, out := cli(viaEnv, "inspect", "match", "-domain", "shop", "-descriptor", "tenant=acme"); code != exitOK {
		t.Errorf("inspect match with SHARDLIMITER_SERVER: exit %d\n%s", code, out)
	}
	if code, out := cli(env(), "inspect", "match", "-server", s.grpc, "-domain", "shop", "-descriptor", "tenant=acme"); code != exitUsage || !strings.Contains(out, "HTTP API") {
		t.Errorf("inspect match given a gRPC address: exit %d, want %d and a hint\n%s", code, exitUsage, out)
	}

	// check: a rules-file rule by name, through the URL, the gRPC address
	// and the environment.
	for _, args := range [][]string{
		{"check", "-server", base, "-name", "per_tenant", "-key", "t1"},
		{"check", "-server", s.grpc, "-name", "per_tenant", "-key", "t1"},
		{"check", "-name", "per_tenant", "-key", "t1"},
	} {
		if code, out := cli(viaEnv, args...); code != exitOK || !strings.Contains(out, "UNDER_LIMIT") || !strings.Contains(out, " left") {
			t.Errorf("%q: exit %d\n%s", args, code, out)
		}
	}
	if code, out := cli(viaEnv, "check", "-name", "per_tenant", "-key", "t1"); code != exitOK || !strings.Contains(out, "0 left") {
		t.Errorf("the 4th check of a limit of 4: exit %d\n%s", code, out)
	}
	if code, out := cli(viaEnv, "check", "-name", "per_tenant", "-key", "t1"); code != exitFail || !strings.Contains(out, "OVER_LIMIT") {
		t.Errorf("the 5th check of a limit of 4: exit %d, want %d OVER_LIMIT\n%s", code, exitFail, out)
	}
	if code, out := cli(viaEnv, "check", "-name", "nosuchrule", "-key", "t1"); code != exitFail || !strings.Contains(out, "nosuchrule") {
		t.Errorf("check of an unknown rule: exit %d, want %d naming it\n%s", code, exitFail, out)
	}
	if code, out := cli(env(), "check", "-h"); code != exitOK || !strings.Contains(out, "SHARDLIMITER_SERVER") {
		t.Errorf("check -h: exit %d, does not mention SHARDLIMITER_SERVER:\n%s", code, out)
	}
	if code, out := cli(env(), "inspect", "key", "-server", base, "-name", "per_tenant", "-key", "t1"); code != exitOK || !strings.Contains(out, "0 of 4 left") {
		t.Errorf("inspect key -server URL: exit %d\n%s", code, out)
	}
}
