package snapshot

import (
	"errors"
	"os"
	"slices"
	"strings"
	"testing"
)

// TestMembersRoundTrip: the names written are the names read, a second
// write replaces the first, a missing file is os.ErrNotExist, and names
// that cannot be one line each are refused.
func TestMembersRoundTrip(t *testing.T) {
	dir := t.TempDir()
	if _, err := LoadMembers(dir, "n1"); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("LoadMembers before any write: %v, want os.ErrNotExist", err)
	}
	for _, names := range [][]string{{"n1", "n2", "n3"}, {"n1", "n3"}} {
		if err := WriteMembers(dir, "n1", names); err != nil {
			t.Fatal(err)
		}
		got, err := LoadMembers(dir, "n1")
		if err != nil || !slices.Equal(got, names) {
			t.Fatalf("LoadMembers = %q, %v; want %q", got, err, names)
		}
	}
	for _, bad := range [][]string{{"a\nb"}, {""}, {strings.Repeat("x", maxMemberName+1)}} {
		if err := WriteMembers(dir, "n1", bad); err == nil {
			t.Errorf("WriteMembers(%q) = nil, want an error", bad)
		}
	}
	if err := os.WriteFile(MembersPath(dir, "n2"), []byte("a\n\nb\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadMembers(dir, "n2"); !errors.Is(err, ErrCorrupt) {
		t.Errorf("LoadMembers of a file with an empty line: %v, want ErrCorrupt", err)
	}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if strings.Contains(e.Name(), ".tmp-") {
			t.Errorf("temporary file left: %s", e.Name())
		}
	}
}
