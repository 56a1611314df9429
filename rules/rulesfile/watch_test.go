package rulesfile

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/shardlimiter/shardlimiter/internal/poll"
	"github.com/shardlimiter/shardlimiter/rules"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const every = 5 * time.Millisecond

func rulesYAML(limit int) string {
	return "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: " + strconv.Itoa(limit) + "}\n"
}

// results records what a watcher reports.
type results struct {
	mu   sync.Mutex
	list []result
}

type result struct {
	version string
	err     error
}

func (r *results) add(v string, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.list = append(r.list, result{v, err})
}

func (r *results) last() (result, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.list) == 0 {
		return result{}, 0
	}
	return r.list[len(r.list)-1], len(r.list)
}

// limitOf returns the limit of d/k in the store's set, or -1.
func limitOf(st *rules.Store) int64 {
	m, ok := st.Load().Match("d", []rules.Entry{{Key: "k", Value: "v"}})
	if !ok {
		return -1
	}
	return m.Limits[0].Rule.Limit
}

// watch starts WatchEvery on paths with a store loaded from them; the
// watcher stops when the test ends.
func watch(t *testing.T, paths ...string) (*rules.Store, *results) {
	t.Helper()
	s, err := rules.Load(paths...)
	if err != nil {
		t.Fatal(err)
	}
	st, res := rules.NewStore(s), &results{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		WatchEvery(ctx, every, paths, st, res.add)
	}()
	t.Cleanup(func() { cancel(); <-done })
	return st, res
}

// write replaces path's content at once (by rename), so that a poll never
// reads a half-written file.
func write(t *testing.T, path, content string) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// TestWatchFile: a valid change is swapped in; a broken file is refused
// with its line, the last good rules stay, and a fix is taken again.
func TestWatchFile(t *testing.T) {
	t.Parallel()
	f := filepath.Join(t.TempDir(), "config.yaml")
	write(t, f, rulesYAML(1))
	st, res := watch(t, f)

	write(t, f, rulesYAML(2))
	poll.Until(t, 5*time.Second, func() bool { return limitOf(st) == 2 }, "limit 2 never applied")
	if r, _ := res.last(); r.err != nil || r.version != st.Load().Version() {
		t.Errorf("reported %+v, want the new version %s", r, st.Load().Version())
	}

	good := st.Load()
	write(t, f, strings.Replace(rulesYAML(3), "second", "fortnight", 1))
	poll.Until(t, 5*time.Second, func() bool { r, _ := res.last(); return r.err != nil }, "broken file not reported")
	r, n := res.last()
	if want := `config.yaml:4: unknown unit "fortnight"`; !strings.Contains(r.err.Error(), want) || r.version != good.Version() {
		t.Errorf("reported %+v, want an error with %q and version %s", r, want, good.Version())
	}
	if st.Load() != good {
		t.Error("the store changed on a broken file")
	}

	// A comment changes the bytes, not the rules: nothing to report.
	write(t, f, rulesYAML(4)+"# note\n")
	poll.Until(t, 5*time.Second, func() bool { return limitOf(st) == 4 }, "fixed file never applied")
	write(t, f, rulesYAML(4)+"# another note\n")
	write(t, f, rulesYAML(5))
	poll.Until(t, 5*time.Second, func() bool { return limitOf(st) == 5 }, "limit 5 never applied")
	if _, m := res.last(); m != n+2 {
		t.Errorf("%d reports after the error, want 2 (limits 4 and 5)", m-n)
	}
}

// TestWatchConfigMap: a directory mounted as Kubernetes mounts a
// ConfigMap, each key a symlink through "..data", which the update swaps
// to a new directory; a key added later is seen too.
func TestWatchConfigMap(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	version := func(name string, files map[string]string) {
		t.Helper()
		if err := os.Mkdir(filepath.Join(dir, name), 0o755); err != nil {
			t.Fatal(err)
		}
		for f, c := range files {
			write(t, filepath.Join(dir, name, f), c)
		}
		// Swap ..data atomically, as the kubelet does.
		tmp := filepath.Join(dir, "..data_tmp")
		if err := os.Symlink(name, tmp); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(dir, "..data")); err != nil {
			t.Fatal(err)
		}
		for f := range files {
			link := filepath.Join(dir, f)
			if _, err := os.Lstat(link); err != nil {
				if err := os.Symlink(filepath.Join("..data", f), link); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	version("..v1", map[string]string{"config.yaml": rulesYAML(1)})
	st, _ := watch(t, dir)
	if limitOf(st) != 1 {
		t.Fatalf("limit %d, want 1", limitOf(st))
	}
	version("..v2", map[string]string{"config.yaml": rulesYAML(2)})
	poll.Until(t, 5*time.Second, func() bool { return limitOf(st) == 2 }, "symlink swap not seen")

	version("..v3", map[string]string{"config.yaml": rulesYAML(2), "more.yaml": "domain: e\ndescriptors:\n  - {key: x, rate_limit: {unit: day, requests_per_unit: 9}}\n"})
	poll.Until(t, 5*time.Second, func() bool {
		_, ok := st.Load().Match("e", []rules.Entry{{Key: "x", Value: "1"}})
		return ok
	}, "new key of the ConfigMap not seen")
}
