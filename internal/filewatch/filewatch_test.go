package filewatch

import (
	"context"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// TestWatchSeesContentChanges steps through one poll per change: content
// counts, a rewrite with the same bytes does not, deletion and re-creation
// do.
func TestWatchSeesContentChanges(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dir := t.TempDir()
		f := filepath.Join(dir, "keys")
		write := func(s string) {
			if err := os.WriteFile(f, []byte(s), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		write("one")
		var calls atomic.Int32
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); Watch(ctx, time.Second, []string{f}, func() { calls.Add(1) }) }()
		poll := func() { time.Sleep(time.Second); synctest.Wait() }

		steps := []struct {
			name   string
			change func()
			want   int32
		}{
			{"nothing changed", func() {}, 0},
			{"new content", func() { write("two") }, 1},
			{"same content rewritten", func() { write("two") }, 1},
			{"deleted", func() { os.Remove(f) }, 2},
			{"still missing", func() {}, 2},
			{"created again", func() { write("two") }, 3},
		}
		synctest.Wait()
		for _, st := range steps {
			st.change()
			poll()
			if got := calls.Load(); got != st.want {
				t.Fatalf("%s: %d changes seen, want %d", st.name, got, st.want)
			}
		}
		cancel()
		<-done
	})
}

// TestWatchSeesSymlinkSwap reproduces the kubelet's atomic writer: the file
// is a symlink through ..data to a timestamped directory, and an update
// renames a new ..data symlink over the old one.
func TestWatchSeesSymlinkSwap(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dir := t.TempDir()
		version := func(name, content string) {
			if err := os.Mkdir(filepath.Join(dir, name), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, name, "tls.crt"), []byte(content), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		swap := func(name string) {
			tmp := filepath.Join(dir, "..data_tmp")
			if err := os.Symlink(name, tmp); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(tmp, filepath.Join(dir, "..data")); err != nil {
				t.Fatal(err)
			}
		}
		version("..2026_11_23_1", "old certificate")
		swap("..2026_11_23_1")
		file := filepath.Join(dir, "tls.crt")
		if err := os.Symlink(filepath.Join("..data", "tls.crt"), file); err != nil {
			t.Fatal(err)
		}
		var calls atomic.Int32
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); Watch(ctx, time.Second, []string{file}, func() { calls.Add(1) }) }()
		synctest.Wait()

		version("..2026_11_23_2", "renewed certificate")
		swap("..2026_11_23_2")
		time.Sleep(time.Second)
		synctest.Wait()
		if got := calls.Load(); got != 1 {
			t.Fatalf("after the ..data swap: %d changes seen, want 1", got)
		}
		cancel()
		<-done
	})
}
