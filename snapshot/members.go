package snapshot

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// The members file beside a snapshot: the names of the members of the last
// ring the node decided in with its cluster, one per line. A node that
// comes back from a stop of every node reads it to tell which of its
// partitions were another member's when it stopped: until that member is
// back, the newest state of their keys may be in that member's snapshot
// alone, and the copies here (replicas) are older.

// maxMembers bounds the names read back: a garbled file is refused before
// it grows without bound.
const (
	maxMembers    = 65536
	maxMemberName = 4096
)

// MembersPath returns the members file of node's snapshot in dir.
func MembersPath(dir, node string) string { return Path(dir, node) + ".members" }

// WriteMembers replaces node's members file in dir with names, atomically
// (a temporary file renamed over it). A name holding a line break is an
// error.
func WriteMembers(dir, node string, names []string) (err error) {
	var b strings.Builder
	for _, n := range names {
		if n == "" || len(n) > maxMemberName || strings.ContainsAny(n, "\r\n") {
			return fmt.Errorf("snapshot: member name %q cannot be written", n)
		}
		b.WriteString(n)
		b.WriteByte('\n')
	}
	final := MembersPath(dir, node)
	f, err := os.CreateTemp(dir, filepath.Base(final)+".tmp-*")
	if err != nil {
		return fmt.Errorf("snapshot: %w", err)
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	if _, err = f.WriteString(b.String()); err != nil {
		return fmt.Errorf("snapshot: %w", err)
	}
	if err = f.Sync(); err != nil {
		return fmt.Errorf("snapshot: %w", err)
	}
	if err = f.Close(); err != nil {
		return fmt.Errorf("snapshot: %w", err)
	}
	if err = os.Rename(f.Name(), final); err != nil {
		return fmt.Errorf("snapshot: %w", err)
	}
	return nil
}

// LoadMembers reads node's members file in dir. A missing file is
// os.ErrNotExist (a node that never decided in a cluster, or an older
// version's state dir); a garbled one an error wrapping ErrCorrupt.
func LoadMembers(dir, node string) ([]string, error) {
	f, err := os.Open(MembersPath(dir, node))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var names []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 256), maxMemberName+1)
	for sc.Scan() {
		if sc.Text() == "" || len(names) == maxMembers {
			return nil, fmt.Errorf("%s: %w: an empty line, or more than %d names", f.Name(), ErrCorrupt, maxMembers)
		}
		names = append(names, sc.Text())
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w: %v", f.Name(), ErrCorrupt, err)
	}
	return names, nil
}
