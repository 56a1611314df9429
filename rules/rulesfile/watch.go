// Package rulesfile keeps a rules.Store in step with the rule files on
// disk: it polls them, and when their content changes it loads them again
// and swaps the new rules in, or, when they do not load, keeps the rules
// it has and reports why.
//
// It polls content, as internal/filewatch does and for the same reason: a
// Kubernetes ConfigMap volume changes by swapping a "..data" symlink, which
// the files' own paths never see as a write. It lists directories again on
// each poll too, so a file added to a watched directory (a new ConfigMap
// key) is noticed, which filewatch's fixed list of paths would miss.
// Reading a few small files once a second costs nothing measurable.
package rulesfile

import (
	"context"
	"crypto/sha256"
	"os"
	"time"

	"github.com/shardlimiter/shardlimiter/rules"
)

// DefaultInterval is how often Watch reads the files.
const DefaultInterval = time.Second

// Watch is WatchEvery at DefaultInterval.
func Watch(ctx context.Context, paths []string, store *rules.Store, onResult func(version string, err error)) {
	WatchEvery(ctx, DefaultInterval, paths, store, onResult)
}

// WatchEvery loads paths (as rules.Load does) now and whenever their
// content, or the list of files in a watched directory, changes, reading
// them every interval until ctx is done. A set whose Version differs from
// the store's is swapped in and reported as onResult(version, nil); a
// set that fails to load is refused: the store keeps its set and
// onResult(the store's version, err) tells why, once per change of the
// files. Loading now as well covers a change between the caller's own
// Load and the first poll. onResult runs on WatchEvery's goroutine, one
// call at a time. WatchEvery returns when ctx is done.
func WatchEvery(ctx context.Context, interval time.Duration, paths []string, store *rules.Store, onResult func(version string, err error)) {
	last := fingerprint(paths)
	reload(paths, store, onResult)
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if now := fingerprint(paths); now != last {
			last = now
			reload(paths, store, onResult)
		}
	}
}

// reload loads paths and swaps the result in when it is new.
func reload(paths []string, store *rules.Store, onResult func(string, error)) {
	s, err := rules.Load(paths...)
	if err != nil {
		onResult(store.Load().Version(), err)
		return
	}
	if store.Load().Version() == s.Version() {
		return // same rules (a comment changed, a file was touched)
	}
	store.Swap(s)
	onResult(s.Version(), nil)
}

// fingerprint hashes what Load would read: the list of files and each
// one's content, or the error that stops the reading.
func fingerprint(paths []string) [sha256.Size]byte {
	h := sha256.New()
	files, err := rules.Files(paths...)
	if err != nil {
		h.Write([]byte("error\x00" + err.Error()))
	}
	for _, f := range files {
		h.Write([]byte(f + "\x00"))
		data, err := os.ReadFile(f)
		if err != nil {
			h.Write([]byte("error\x00" + err.Error()))
			continue
		}
		sum := sha256.Sum256(data)
		h.Write(sum[:])
	}
	var sum [sha256.Size]byte
	h.Sum(sum[:0])
	return sum
}
