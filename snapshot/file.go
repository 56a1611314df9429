package snapshot

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/shardlimiter/shardlimiter/limit"
)

// Files: one per node, named after it, so that several nodes can share a
// directory on one host. A write goes to a temporary file beside it, is
// synced, renamed over the old file and the directory synced: a reader
// sees the old snapshot or the new one, never a part, and a crash at any
// point leaves one of the two (and perhaps a temporary file, removed by
// RemoveTemp).

// Path returns the snapshot file of node in dir. Characters of the name
// other than letters, digits, '.', '-' and '_' become '_'.
func Path(dir, node string) string {
	return filepath.Join(dir, fileBase(node)+".snapshot")
}

func fileBase(node string) string {
	if node == "" {
		node = "_"
	}
	return strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '.', r == '-', r == '_':
			return r
		}
		return '_'
	}, node)
}

// Write writes node's snapshot in dir atomically: fill writes the records,
// and only when it and every write, the sync and the rename succeed does
// the new file replace the old one. On an error the old file is kept and
// the temporary one removed.
func Write(dir, node string, writtenAt int64, fill func(w *Writer) error) (info Info, err error) {
	final := Path(dir, node)
	f, err := os.CreateTemp(dir, filepath.Base(final)+".tmp-*")
	if err != nil {
		return info, fmt.Errorf("snapshot: %w", err)
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	w := NewWriter(f, writtenAt)
	if err = fill(w); err != nil {
		return info, err
	}
	if err = w.Close(); err != nil {
		return info, fmt.Errorf("snapshot: writing %s: %w", f.Name(), err)
	}
	if err = f.Sync(); err != nil {
		return info, fmt.Errorf("snapshot: %w", err)
	}
	if err = f.Close(); err != nil {
		return info, fmt.Errorf("snapshot: %w", err)
	}
	if err = os.Rename(f.Name(), final); err != nil {
		return info, fmt.Errorf("snapshot: %w", err)
	}
	// The rename is durable once the directory is: without this, a power
	// cut may bring back the old file (or none).
	if err = syncDir(dir); err != nil {
		return info, fmt.Errorf("snapshot: %w", err)
	}
	return Info{WrittenAt: writtenAt, Records: w.Records()}, nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// Load reads node's snapshot in dir: it verifies the whole file first and
// then calls fn with each record, so a damaged file reaches fn not at all
// (the error wraps ErrCorrupt). A missing file is os.ErrNotExist (check
// with errors.Is): a node's first start.
func Load(dir, node string, fn func(ks limit.KeyState) error) (Info, error) {
	f, err := os.Open(Path(dir, node))
	if err != nil {
		return Info{}, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return Info{}, err
	}
	info, err := Verify(f, st.Size())
	if err != nil {
		return info, fmt.Errorf("%s: %w", f.Name(), err)
	}
	// The open file is the one verified, whatever a rename does meanwhile.
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return Info{}, err
	}
	if info, err = Decode(f, st.Size(), fn); err != nil && errors.Is(err, ErrCorrupt) {
		return info, fmt.Errorf("%s: changed while read: %w", f.Name(), err)
	}
	return info, err
}

// RemoveTemp removes the temporary files a write of node's snapshot (or of
// its members file) in dir left behind (a crash during the write), and
// returns how many it removed.
func RemoveTemp(dir, node string) int {
	entries, _ := os.ReadDir(dir)
	prefix, members := filepath.Base(Path(dir, node))+".tmp-", filepath.Base(MembersPath(dir, node))+".tmp-"
	removed := 0
	for _, e := range entries {
		if (strings.HasPrefix(e.Name(), prefix) || strings.HasPrefix(e.Name(), members)) && os.Remove(filepath.Join(dir, e.Name())) == nil {
			removed++
		}
	}
	return removed
}
