package manifests

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// The binary is built once per test run, from the main module (the parent
// of this module), with the flags of scripts/build-image.sh so that the build
// cache is shared with the image build.
var (
	buildOnce sync.Once
	buildDir  string
	buildBin  string
	buildErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if buildDir != "" {
		os.RemoveAll(buildDir)
	}
	os.Exit(code)
}

// binary returns the path of the built shardlimiter binary. It skips the test
// only when the go command is missing; a missing or broken cmd/shardlimiter
// fails it.
func binary(t *testing.T) string {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("go not on PATH: cannot build cmd/shardlimiter")
	}
	buildOnce.Do(func() {
		buildDir, buildErr = os.MkdirTemp("", "shardlimiter-k8s-test-")
		if buildErr != nil {
			return
		}
		buildBin = filepath.Join(buildDir, "shardlimiter")
		root, err := filepath.Abs("..")
		if err != nil {
			buildErr = err
			return
		}
		cmd := exec.Command(goBin, "build", "-trimpath", "-ldflags", "-s -w", "-o", buildBin, "./cmd/shardlimiter")
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build ./cmd/shardlimiter (in the repository root): %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return buildBin
}

var (
	helpEnv  = regexp.MustCompile(`\bSHARDLIMITER_[A-Z0-9_]+\b`)
	helpFlag = regexp.MustCompile(`(?m)^\s*--?([a-z][a-z0-9-]*)\b`)
)

// binaryEnv returns the SHARDLIMITER_* variables the binary reads, from
// its --help, and checks that every flag listed there has its variable.
func binaryEnv(t *testing.T) map[string]bool {
	t.Helper()
	bin := binary(t)
	var out bytes.Buffer
	cmd := exec.Command(bin, "--help")
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.Env = envWithout(os.Environ(), "SHARDLIMITER_")
	if err := cmd.Run(); err != nil {
		var exit *exec.ExitError
		if !errors.As(err, &exit) {
			t.Fatalf("%s --help: %v", bin, err)
		}
		t.Logf("%s --help exited with %v", bin, err) // Some flag parsers exit 2 on help.
	}
	env := map[string]bool{}
	for _, v := range helpEnv.FindAllString(out.String(), -1) {
		env[v] = true
	}
	for _, m := range helpFlag.FindAllStringSubmatch(out.String(), -1) {
		if m[1] == "h" || m[1] == "help" {
			continue
		}
		if v := "SHARDLIMITER_" + strings.ToUpper(strings.ReplaceAll(m[1], "-", "_")); !env[v] {
			t.Errorf("--help lists flag --%s without its variable %s", m[1], v)
		}
	}
	if len(env) == 0 {
		t.Fatalf("%s --help names no SHARDLIMITER_* variable:\n%s", bin, out.String())
	}
	return env
}

func envWithout(env []string, prefix string) []string {
	return slices.DeleteFunc(slices.Clone(env), func(kv string) bool { return strings.HasPrefix(kv, prefix) })
}

// TestManifestEnvKnownToBinary: every SHARDLIMITER_* variable an overlay
// sets, in any container or ConfigMap, is one the binary reads. A typo
// there would be silently ignored by the binary.
func TestManifestEnvKnownToBinary(t *testing.T) {
	known := binaryEnv(t)
	for _, src := range sources {
		dir := src.name
		t.Run(dir, func(t *testing.T) {
			r := render(t, dir)
			set := map[string]string{} // variable → where
			for _, cm := range r.ConfigMaps {
				for k := range cm.Data {
					set[k] = "ConfigMap " + cm.Name
				}
			}
			for _, pod := range r.podSpecs() {
				for _, c := range pod.containers {
					for _, e := range c.Env {
						set[e.Name] = pod.name + " container " + c.Name
					}
				}
			}
			n := 0
			for v, where := range set {
				if !strings.HasPrefix(v, "SHARDLIMITER_") {
					continue
				}
				n++
				if !known[v] {
					t.Errorf("%s sets %s, which the binary does not read (see shardlimiter --help)", where, v)
				}
			}
			if n == 0 {
				t.Errorf("%s sets no SHARDLIMITER_* variable", dir)
			}
		})
	}
}

type podSpecRef struct {
	name       string
	containers []corev1.Container
}

// podSpecs lists every workload's containers (init containers included).
func (r *rendered) podSpecs() []podSpecRef {
	var out []podSpecRef
	for _, d := range r.DaemonSets {
		s := d.Spec.Template.Spec
		out = append(out, podSpecRef{"DaemonSet " + d.Name, slices.Concat(s.InitContainers, s.Containers)})
	}
	for _, d := range r.Deployments {
		s := d.Spec.Template.Spec
		out = append(out, podSpecRef{"Deployment " + d.Name, slices.Concat(s.InitContainers, s.Containers)})
	}
	return out
}

// freePorts returns a loopback port free for both TCP and UDP (gossip
// uses both on one port), and n more ports free for TCP. The listeners are
// closed before returning: the binary binds them right after.
func freePorts(t *testing.T, n int) (both int, tcp []int) {
	t.Helper()
	var closers []func() error
	defer func() {
		for _, c := range closers {
			c()
		}
	}()
	listenTCP := func() int {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		closers = append(closers, l.Close)
		return l.Addr().(*net.TCPAddr).Port
	}
	for both == 0 {
		p := listenTCP()
		if pc, err := net.ListenPacket("udp", "127.0.0.1:"+strconv.Itoa(p)); err == nil {
			closers = append(closers, pc.Close)
			both = p
		}
	}
	for range n {
		tcp = append(tcp, listenTCP())
	}
	return both, tcp
}
