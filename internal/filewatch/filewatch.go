// Package filewatch tells when files change, by content.
//
// It polls: it reads each file every interval and compares a SHA-256 of its
// content with the last one. Content, not modification times or inotify,
// because of how files change under Kubernetes: a Secret or ConfigMap
// volume swaps a "..data" symlink to a new directory (the file's own path
// never sees a write event), and cert-manager renews a certificate in
// place. Polling a few small files once a second costs nothing measurable.
package filewatch

import (
	"context"
	"crypto/sha256"
	"os"
	"time"
)

// state is what one poll saw of one file: its hash, or that it could not
// be read (missing, unreadable), which is a state of its own so that a
// deletion and a re-creation are both seen.
type state struct {
	sum      [sha256.Size]byte
	readable bool
}

func read(path string) state {
	b, err := os.ReadFile(path)
	if err != nil {
		return state{}
	}
	return state{sum: sha256.Sum256(b), readable: true}
}

// Watch reads paths now and then every interval until ctx is done, and
// calls changed whenever any of them differs from the previous poll.
// changed runs on Watch's goroutine, one call at a time; a slow changed
// delays the next poll. Watch returns when ctx is done.
func Watch(ctx context.Context, every time.Duration, paths []string, changed func()) {
	last := make([]state, len(paths))
	for i, p := range paths {
		last[i] = read(p)
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		diff := false
		for i, p := range paths {
			if now := read(p); now != last[i] {
				last[i], diff = now, true
			}
		}
		if diff {
			changed()
		}
	}
}
