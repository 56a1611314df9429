package main

import (
	"bytes"
	"context"
	"flag"
	"io"
	"log/slog"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/shardlimiter/shardlimiter/peer"
)

func env(kv ...string) func(string) string {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return func(k string) string { return m[k] }
}

func TestConfigDefaults(t *testing.T) {
	t.Parallel()
	c, err := parseConfig(nil, env(), &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if c.httpAddr != ":8080" || c.grpcAddr != ":8081" || c.gossipAddr != ":7946" || c.maxKeys != 1_000_000 ||
		c.maxBatch != 1000 || c.failPolicy != peer.FailLocal || c.logLevel != slog.LevelInfo ||
		c.logFormat != "text" || c.shutdownGrace != 5*time.Second || len(c.join) != 0 || c.peerAddr != ":8082" ||
		c.probeInterval != 500*time.Millisecond {
		t.Fatalf("defaults = %+v", c)
	}
}

func TestConfigFlagsEnvironmentAndPrecedence(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name  string
		args  []string
		env   func(string) string
		check func(config) bool
	}{
		{"env sets", nil, env("SHARDLIMITER_GRPC_ADDR", "127.0.0.1:9000", "SHARDLIMITER_JOIN", "a:7946, b ,", "SHARDLIMITER_FAIL_POLICY", "closed"),
			func(c config) bool {
				return c.grpcAddr == "127.0.0.1:9000" && strings.Join(c.join, "|") == "a:7946|b" && c.failPolicy == peer.FailClosed
			}},
		{"flag beats env", []string{"--max-keys", "5"}, env("SHARDLIMITER_MAX_KEYS", "7"),
			func(c config) bool { return c.maxKeys == 5 }},
		{"single dash and equals", []string{"-log-level=debug", "--log-format=json"}, env(),
			func(c config) bool { return c.logLevel == slog.LevelDebug && c.logFormat == "json" }},
		{"node name and advertise", []string{"--node-name", "n1", "--advertise-addr", "10.1.2.3"}, env(),
			func(c config) bool { return c.nodeName == "n1" && advertiseHost(c) == "10.1.2.3" }},
		{"probe interval", nil, env("SHARDLIMITER_GOSSIP_PROBE_INTERVAL", "5s"),
			func(c config) bool { return c.probeInterval == 5*time.Second }},
		{"state dir", []string{"--snapshot-interval", "3s"}, env("SHARDLIMITER_STATE_DIR", "/var/lib/x", "SHARDLIMITER_SNAPSHOT_NAME", "k8s-node-1"),
			func(c config) bool {
				return c.stateDir == "/var/lib/x" && c.snapshotEvery == 3*time.Second && c.snapshotName == "k8s-node-1"
			}},
	}
	for _, tc := range cases {
		c, err := parseConfig(tc.args, tc.env, &bytes.Buffer{})
		if err != nil || !tc.check(c) {
			t.Errorf("%s: parseConfig(%q) = %+v, %v", tc.name, tc.args, c, err)
		}
	}
}

func TestConfigRejectsBadValues(t *testing.T) {
	t.Parallel()
	cases := []struct {
		args []string
		env  func(string) string
		want string
	}{
		{[]string{"--http-addr", "8080"}, env(), "--http-addr: want host:port"},
		{[]string{"--grpc-addr", ":99999"}, env(), "--grpc-addr: bad port"},
		{nil, env("SHARDLIMITER_MAX_KEYS", "lots"), "SHARDLIMITER_MAX_KEYS: want a positive integer"},
		{nil, env("SHARDLIMITER_MAX_BATCH", "x"), `SHARDLIMITER_MAX_BATCH: want a positive integer, got "x"`},
		{nil, env("SHARDLIMITER_SHADOW_MODE", "maybe"), "SHARDLIMITER_SHADOW_MODE: want true or false"},
		{[]string{"--max-batch", "x"}, env("SHARDLIMITER_MAX_BATCH", "x"), "--max-batch: want a positive integer"},
		{[]string{"--max-batch", "0"}, env(), "--max-batch: want a positive integer"},
		{[]string{"--log-level", "loud"}, env(), "--log-level"},
		{[]string{"--log-format", "xml"}, env(), "--log-format"},
		{[]string{"--fail-policy", "maybe"}, env(), "--fail-policy: want local, open or closed"},
		{[]string{"--shutdown-grace", "soon"}, env(), "--shutdown-grace"},
		{[]string{"--peer-addr", "x"}, env(), "--peer-addr: want host:port"},
		{[]string{"--snapshot-interval", "0s"}, env(), "--snapshot-interval: want a positive duration"},
		{[]string{"--gossip-probe-interval", "0s"}, env(), "--gossip-probe-interval: want a duration like 500ms"},
		{[]string{"--gossip-probe-interval", "50ms"}, env(), `--gossip-probe-interval: want 100ms to 1m0s, got "50ms"`},
		{nil, env("SHARDLIMITER_GOSSIP_PROBE_INTERVAL", "2m"), `SHARDLIMITER_GOSSIP_PROBE_INTERVAL: want 100ms to 1m0s, got "2m"`},
		{[]string{"--rls-header-reset", "Rate Limit"}, env(), "--rls-header-reset: \"Rate Limit\" is not an HTTP header name"},
		{[]string{"--rls-headers-format", "draft-7"}, env(), "--rls-headers-format: unknown headers format"},
		{[]string{"--health-addr", "8083"}, env(), "--health-addr: want host:port"},
		{nil, env("SHARDLIMITER_GUBERNATOR_HTTP_ADDR", "9080"), "SHARDLIMITER_GUBERNATOR_HTTP_ADDR: want host:port"},
		{[]string{"--peer-tls-cert-file", "a", "--peer-tls-key-file", "b"}, env(), "needs all three"},
		{[]string{"--tls-cert-file", "a"}, env(), "needs both"},
		{[]string{"--tls-client-ca-file", "a"}, env(), "client certificates need TLS"},
		{[]string{"--metrics-max-rules", "0"}, env(), "--metrics-max-rules: want a positive integer"},
		{[]string{"--metrics-max-detailed", "-1"}, env(), "--metrics-max-detailed: want 0 or a positive integer"},
		{[]string{"--no-such-flag"}, env(), "flag provided but not defined"},
		{[]string{"extra"}, env(), `unexpected argument "extra"`},
	}
	for _, tc := range cases {
		_, err := parseConfig(tc.args, tc.env, &bytes.Buffer{})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("parseConfig(%q) error = %v, want %q", tc.args, err, tc.want)
		}
	}
}

// An error names what the operator wrote: the variable when the value came
// from the environment, the flag otherwise, never the other one.
func TestConfigErrorsNameTheirSource(t *testing.T) {
	t.Parallel()
	_, err := parseConfig(nil, env("SHARDLIMITER_MAX_BATCH", "x"), &bytes.Buffer{})
	if err == nil || strings.Contains(err.Error(), "--max-batch") {
		t.Errorf("SHARDLIMITER_MAX_BATCH=x: error = %v, want it to name the variable, not --max-batch", err)
	}
	_, err = parseConfig([]string{"--max-batch", "x"}, env(), &bytes.Buffer{})
	if err == nil || strings.Contains(err.Error(), "SHARDLIMITER_MAX_BATCH") {
		t.Errorf("--max-batch x: error = %v, want it to name the flag", err)
	}
}

// --peer-addr defaults to the host of --grpc-addr with port 8082, so nodes
// started on distinct loopback hosts with only their other addresses do not
// all take *:8082.
func TestPeerAddrDefaultsToTheGRPCHost(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		env  func(string) string
		want string
	}{
		{nil, env(), ":8082"},
		{[]string{"--grpc-addr", "127.0.0.5:8081"}, env(), "127.0.0.5:8082"},
		{[]string{"--grpc-addr", "127.0.0.5:9000"}, env(), "127.0.0.5:8082"},
		{[]string{"--grpc-addr", "[::1]:8081"}, env(), "[::1]:8082"},
		{nil, env("SHARDLIMITER_GRPC_ADDR", "10.0.0.7:8081"), "10.0.0.7:8082"},
		{[]string{"--grpc-addr", "127.0.0.5:8081", "--peer-addr", "127.0.0.6:9999"}, env(), "127.0.0.6:9999"},
		{[]string{"--grpc-addr", "127.0.0.5:8081"}, env("SHARDLIMITER_PEER_ADDR", ":7000"), ":7000"},
	} {
		c, err := parseConfig(tc.args, tc.env, &bytes.Buffer{})
		if err != nil || c.peerAddr != tc.want {
			t.Errorf("parseConfig(%q).peerAddr = %q, %v; want %q", tc.args, c.peerAddr, err, tc.want)
		}
	}
}

func TestRunExitCodes(t *testing.T) {
	t.Parallel()
	var out, errOut bytes.Buffer
	if code := run(context.Background(), []string{"--log-format", "xml", "--max-keys", "0"}, env(), &out, &errOut); code != exitUsage {
		t.Fatalf("run(bad flags) = %d, want %d", code, exitUsage)
	}
	// Both problems are reported at once.
	if s := errOut.String(); !strings.Contains(s, "--log-format") || !strings.Contains(s, "--max-keys") {
		t.Fatalf("stderr = %q, want both bad flags named", s)
	}
}

// TestHelpNamesEveryEnvironmentVariable keeps --help the place where
// operators (and the k8s wiring test) learn each flag's variable.
func TestHelpNamesEveryEnvironmentVariable(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	if code := run(context.Background(), []string{"--help"}, env(), &out, &out); code != exitOK {
		t.Fatalf("--help exit %d", code)
	}
	fs, _ := newFlagSet("x", &bytes.Buffer{})
	fs.VisitAll(func(f *flag.Flag) {
		if !regexp.MustCompile(`-` + f.Name + `\b[^\n]*\n[^\n]*\(env ` + envName(f.Name) + `\)`).MatchString(out.String()) {
			t.Errorf("--help does not pair -%s with %s", f.Name, envName(f.Name))
		}
	})
}

// --help names the subcommands, so that `config check` is found.
func TestHelpNamesTheSubcommands(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	if code := run(context.Background(), []string{"--help"}, env(), &out, &out); code != exitOK {
		t.Fatalf("--help exit %d", code)
	}
	for _, want := range []string{"shardlimiter check [flags]", "shardlimiter config check FILE|DIR"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("--help lacks %q:\n%s", want, out.String())
		}
	}
}

// --advertise-addr may carry the gossip port ("host:port", passed to
// gossip as is) or be a bracketed IPv6 literal; the gRPC address peers
// forward to is built from its host alone.
func TestAdvertiseHostDropsPortAndBrackets(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"10.1.2.3":        "10.1.2.3",
		"10.1.2.3:7000":   "10.1.2.3",
		"node-a.svc:7000": "node-a.svc",
		"fd00::1":         "fd00::1",
		"[fd00::1]":       "fd00::1",
		"[fd00::1]:7000":  "fd00::1",
	} {
		c, err := parseConfig([]string{"--advertise-addr", in}, env(), &bytes.Buffer{})
		if err != nil {
			t.Fatalf("parseConfig(--advertise-addr %q) = %v", in, err)
		}
		if got := advertiseHost(c); got != want {
			t.Errorf("advertiseHost(--advertise-addr %q) = %q, want %q", in, got, want)
		}
	}
}

// TestBadKeyAndCertificateFilesStopTheStart: a key or certificate file that
// cannot be used is an error at start, never a silent fall back to
// plaintext.
func TestBadKeyAndCertificateFilesStopTheStart(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	bad := dir + "/bad"
	if err := os.WriteFile(bad, []byte("not a key\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"--gossip-key-file", bad},
		{"--gossip-key-file", dir + "/missing"},
		{"--tls-cert-file", bad, "--tls-key-file", bad},
		{"--peer-tls-cert-file", bad, "--peer-tls-key-file", bad, "--peer-tls-ca-file", bad},
	} {
		var stderr bytes.Buffer
		args = append(args, "--http-addr", "127.0.0.1:0", "--grpc-addr", "127.0.0.1:0", "--peer-addr", "127.0.0.1:0", "--gossip-addr", "127.0.0.1:0")
		if code := run(context.Background(), args, env(), io.Discard, &stderr); code != exitFail {
			t.Errorf("run(%q) = %d, want %d; stderr: %s", args, code, exitFail, stderr.String())
		}
		if !strings.Contains(stderr.String(), "cannot start") {
			t.Errorf("run(%q): stderr %q does not say it cannot start", args, stderr.String())
		}
	}
}
