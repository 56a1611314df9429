package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// serverBinary returns bin, or builds ./cmd/shardlimiter into a temporary
// directory that cleanup removes.
func serverBinary(ctx context.Context, bin string, log io.Writer) (_ string, cleanup func(), err error) {
	if bin != "" {
		return bin, func() {}, nil
	}
	dir, err := os.MkdirTemp("", "shardlimiter-loadtest-")
	if err != nil {
		return "", nil, err
	}
	fmt.Fprintln(log, "loadtest: building ./cmd/shardlimiter")
	if bin, err = buildServer(ctx, dir); err != nil {
		os.RemoveAll(dir)
		return "", nil, err
	}
	return bin, func() { os.RemoveAll(dir) }, nil
}

// modulePath is the module whose server --local builds.
const modulePath = "github.com/shardlimiter/shardlimiter"

// buildServer builds ./cmd/shardlimiter of the module around the current
// directory into dir.
func buildServer(ctx context.Context, dir string) (string, error) {
	out, err := exec.CommandContext(ctx, "go", "env", "GOMOD").Output()
	gomod := strings.TrimSpace(string(out))
	if err != nil || gomod == "" || gomod == os.DevNull {
		return "", errors.New("--local builds ./cmd/shardlimiter: run inside the shardlimiter module, or give --server-bin")
	}
	if mod, err := os.ReadFile(gomod); err != nil || !bytes.Contains(mod, []byte("module "+modulePath+"\n")) {
		return "", fmt.Errorf("--local builds ./cmd/shardlimiter: %s is not the %s module; run inside it, or give --server-bin", gomod, modulePath)
	}
	bin := filepath.Join(dir, "shardlimiter")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/shardlimiter")
	cmd.Dir = filepath.Dir(gomod)
	setProcessGroup(cmd) // a cancelled build takes its compilers along
	if msg, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/shardlimiter: %w\n%s", err, msg)
	}
	return bin, nil
}
