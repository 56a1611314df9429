package main

import (
	"errors"
	"io/fs"
	"testing"
)

func TestParseSize(t *testing.T) {
	t.Parallel()
	good := map[string]int64{
		"1":        1,
		"1048576":  1 << 20,
		"512MiB":   512 << 20,
		"512Mi":    512 << 20,
		"2GiB":     2 << 30,
		"2gib":     2 << 30,
		"1.5Gi":    3 << 29,
		"1G":       1_000_000_000,
		"1GB":      1_000_000_000,
		"64k":      64_000,
		"64KiB":    64 << 10,
		"100B":     100,
		" 256 MiB": 256 << 20,
		"1TiB":     1 << 40,
	}
	for in, want := range good {
		if got, err := parseSize(in); err != nil || got != want {
			t.Errorf("parseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "0", "-1", "MiB", "1.5", "lots", "1e9", "0x10", "Inf", "NaN", "1PiB2", "9999999TiB", "0.1B"} {
		if got, err := parseSize(in); err == nil {
			t.Errorf("parseSize(%q) = %d, want an error", in, got)
		}
	}
}

// files returns a readFile that serves contents and fails for other paths.
func files(contents map[string]string) func(string) ([]byte, error) {
	return func(path string) ([]byte, error) {
		if v, ok := contents[path]; ok {
			return []byte(v), nil
		}
		return nil, fs.ErrNotExist
	}
}

func TestMemoryBudget(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		flag   string
		files  map[string]string
		want   int64
		source string
	}{
		{"flag wins over the cgroup", "512MiB", map[string]string{cgroupV2Memory: "1073741824\n"}, 512 << 20, memoryFromFlag},
		{"cgroup v2 limit", "auto", map[string]string{cgroupV2Memory: "1073741824\n"}, 1 << 30, memoryFromCgroup},
		{"cgroup v2 no limit", "auto", map[string]string{cgroupV2Memory: "max\n", cgroupV1Memory: "1073741824\n"}, defaultMemory, memoryFromDefault},
		{"cgroup v1 limit", "", map[string]string{cgroupV1Memory: "536870912\n"}, 512 << 20, memoryFromCgroup},
		{"cgroup v1 no limit", "auto", map[string]string{cgroupV1Memory: "9223372036854771712\n"}, defaultMemory, memoryFromDefault},
		{"cgroup file unreadable", "auto", nil, defaultMemory, memoryFromDefault},
		{"cgroup file garbage", "auto", map[string]string{cgroupV2Memory: "lots"}, defaultMemory, memoryFromDefault},
	}
	for _, tc := range cases {
		got, src, err := memoryBudget(tc.flag, files(tc.files))
		if err != nil || got != tc.want || src != tc.source {
			t.Errorf("%s: memoryBudget(%q) = %d, %q, %v; want %d, %q", tc.name, tc.flag, got, src, err, tc.want, tc.source)
		}
	}
	if _, _, err := memoryBudget("half", files(nil)); !errors.Is(err, errSize) {
		t.Errorf("memoryBudget(half) error = %v, want errSize", err)
	}
}

func TestFormatSize(t *testing.T) {
	t.Parallel()
	for n, want := range map[int64]string{512 << 20: "512.0MiB", 3 << 29: "1.5GiB", 2048: "2.0KiB", 100: "100B"} {
		if got := formatSize(n); got != want {
			t.Errorf("formatSize(%d) = %q, want %q", n, got, want)
		}
	}
}

func TestGoMemoryLimitLeavesHeadroom(t *testing.T) {
	t.Parallel()
	for _, b := range []int64{256 << 20, 512 << 20, 2 << 30} {
		if got := goMemoryLimit(b); got >= b || got < b*8/10 {
			t.Errorf("goMemoryLimit(%d) = %d, want between 80%% and 100%% of the budget", b, got)
		}
	}
}
