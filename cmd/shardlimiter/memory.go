package main

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"runtime/debug"
	"strconv"
	"strings"
)

// The node's memory budget (--max-memory): parsing sizes, and the default
// from the container's cgroup memory limit.

// defaultMemory is the budget when neither the flag nor a cgroup limit
// gives one.
const defaultMemory = 2 << 30

// The budget is the memory the node may use, like a container's limit (and
// by default it is that limit). Within it:
//
//   - the Go runtime's soft limit is goLimitShare of it, so the collector
//     works harder before the process reaches the budget: the rest covers
//     what the runtime does not manage (the binary, the kernel's view of
//     freed pages not yet returned) so that an OOM killer never has to act;
//   - the tables hold at most peer.TableShare of it (peer.TableBudget); the
//     rest of the soft limit is the collector's headroom and the requests,
//     answers and connection buffers in flight (bounded by --max-inflight
//     and the body-bytes bound).
const goLimitShare = 0.9

// noLimit is where a cgroup limit counts as none: cgroup v1 reports "no
// limit" as a huge page-aligned number (9223372036854771712).
const noLimit = 1 << 60

// Cgroup files holding the memory limit, v2 first.
const (
	cgroupV2Memory = "/sys/fs/cgroup/memory.max"
	cgroupV1Memory = "/sys/fs/cgroup/memory/memory.limit_in_bytes"
)

// Where the budget came from, as logged at start.
const (
	memoryFromFlag    = "flag"
	memoryFromCgroup  = "cgroup"
	memoryFromDefault = "default"
)

// memoryBudget resolves --max-memory: a size, or "auto" (or empty) for the
// cgroup limit read through readFile, else defaultMemory. It returns the bytes and their source.
func memoryBudget(value string, readFile func(string) ([]byte, error)) (int64, string, error) {
	if v := strings.TrimSpace(value); v != "" && v != "auto" {
		n, err := parseSize(v)
		if err != nil {
			return 0, "", err
		}
		return n, memoryFromFlag, nil
	}
	if limit, ok := cgroupMemoryLimit(readFile); ok {
		return limit, memoryFromCgroup, nil
	}
	return defaultMemory, memoryFromDefault, nil
}

// cgroupMemoryLimit returns the memory limit of this process's cgroup
// (v2, else v1), and false when there is none or it cannot be read.
func cgroupMemoryLimit(readFile func(string) ([]byte, error)) (int64, bool) {
	for _, path := range []string{cgroupV2Memory, cgroupV1Memory} {
		b, err := readFile(path)
		if err != nil {
			continue
		}
		v := strings.TrimSpace(string(b))
		if v == "max" {
			return 0, false
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n <= 0 || n >= noLimit {
			return 0, false
		}
		return n, true
	}
	return 0, false
}

// sizeUnits are the suffixes parseSize takes (case does not matter):
// binary with an i (Ki, MiB), decimal without (K, MB), as Kubernetes
// quantities.
var sizeUnits = []struct {
	suffix string
	mult   float64
}{
	{"kib", 1 << 10}, {"mib", 1 << 20}, {"gib", 1 << 30}, {"tib", 1 << 40},
	{"ki", 1 << 10}, {"mi", 1 << 20}, {"gi", 1 << 30}, {"ti", 1 << 40},
	{"kb", 1e3}, {"mb", 1e6}, {"gb", 1e9}, {"tb", 1e12},
	{"k", 1e3}, {"m", 1e6}, {"g", 1e9}, {"t", 1e12},
	{"b", 1},
}

var errSize = errors.New("want a size like 512MiB, 2GiB, 1G or plain bytes")

// parseSize reads a positive size in bytes: plain bytes ("1048576"), or a
// number (fractions allowed) and a unit from sizeUnits ("512MiB",
// "1.5Gi", "1G").
func parseSize(s string) (int64, error) {
	num, mult, unit := strings.TrimSpace(s), 1.0, false
	lower := strings.ToLower(num)
	for _, u := range sizeUnits {
		if strings.HasSuffix(lower, u.suffix) {
			num, mult, unit = strings.TrimSpace(num[:len(num)-len(u.suffix)]), u.mult, true
			break
		}
	}
	if !unit { // plain bytes: a whole number
		if n, err := strconv.ParseInt(num, 10, 64); err == nil && n > 0 {
			return n, nil
		}
		return 0, fmt.Errorf("%w, got %q", errSize, s)
	}
	f, err := strconv.ParseFloat(num, 64)
	if err != nil || !(f > 0) || num == "" || strings.ContainsAny(num, "eEnNxX") {
		return 0, fmt.Errorf("%w, got %q", errSize, s)
	}
	v := f * mult
	if v < 1 || v >= math.MaxInt64 {
		return 0, fmt.Errorf("%w, got %q (out of range)", errSize, s)
	}
	return int64(v), nil
}

// formatSize writes n in the largest binary unit that keeps one decimal,
// for logs.
func formatSize(n int64) string {
	for _, u := range []struct {
		name string
		v    int64
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if n >= u.v {
			return strconv.FormatFloat(float64(n)/float64(u.v), 'f', 1, 64) + u.name
		}
	}
	return strconv.FormatInt(n, 10) + "B"
}

// goMemoryLimit is the Go runtime's soft limit under a budget of maxMemory.
func goMemoryLimit(maxMemory int64) int64 { return int64(float64(maxMemory) * goLimitShare) }

// applyMemoryBudget makes the Go runtime collect before the process
// reaches the budget (debug.SetMemoryLimit at goLimitShare of it), unless
// the environment sets GOMEMLIMIT, which the runtime has already applied
// and which wins; and logs the budget and where it came from, once.
func applyMemoryBudget(c config, getenv func(string) string, log *slog.Logger) {
	goLimit := formatSize(goMemoryLimit(c.maxMemory))
	if v := getenv("GOMEMLIMIT"); v != "" {
		goLimit = "GOMEMLIMIT=" + v
	} else {
		debug.SetMemoryLimit(goMemoryLimit(c.maxMemory))
	}
	log.Info("memory budget", "max_memory", formatSize(c.maxMemory), "bytes", c.maxMemory,
		"source", c.memorySource, "go_memory_limit", goLimit)
}
