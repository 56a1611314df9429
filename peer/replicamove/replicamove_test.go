package replicamove

import (
	"slices"
	"testing"

	"github.com/shardlimiter/shardlimiter/ring"
)

// ringOf is the ring of names.
func ringOf(t *testing.T, names ...string) Ring {
	t.Helper()
	var ms []ring.Member
	for _, n := range names {
		ms = append(ms, ring.Member{Name: n})
	}
	snap, err := ring.New(ms, 1, ring.Config{})
	if err != nil {
		t.Fatal(err)
	}
	withouts := map[string]*ring.Snapshot{} // built once each, as view.without does
	return Ring{Snap: snap, Without: func(name string) *ring.Snapshot {
		if w, ok := withouts[name]; ok {
			return w
		}
		w, err := snap.Without(name)
		if err != nil {
			w = nil
		}
		withouts[name] = w
		return w
	}}
}

// holder is the replica holder of partition p while owner owns it in r:
// its owner in r without owner; "" when there is none.
func holder(r Ring, owner string, p int) string {
	w := r.Without(owner)
	if w == nil {
		return ""
	}
	return w.Member(w.PartitionOwner(p)).Name
}

func ownerOf(r Ring, p int) string { return r.Snap.Member(r.Snap.PartitionOwner(p)).Name }

// TestMoves: which partitions a rebuild has sent whole to their replica
// holder, for pairs of rings seen by one member.
func TestMoves(t *testing.T) {
	t.Parallel()
	abc, abcd := ringOf(t, "a", "b", "c"), ringOf(t, "a", "b", "c", "d")
	for _, tc := range []struct {
		name, self string
		old, cur   Ring
		some       bool // some partition must be sent
	}{
		{"join of d, seen by a", "a", abc, abcd, true},
		{"leave of d, seen by a", "a", abcd, abc, true},
		{"no change", "a", abcd, abcd, false},
		{"a was alone", "a", ringOf(t, "a"), abc, true},
		{"a is alone", "a", abc, ringOf(t, "a"), false},
		{"a is not a member", "a", abc, ringOf(t, "b", "c"), false},
		{"crash of a, seen by b", "b", abc, ringOf(t, "b", "c"), true},
		{"join of d, seen by d (from the others' ring)", "d", abc, abcd, false},
	} {
		got := Moves(tc.old, tc.cur, tc.self)
		if tc.some != (len(got) > 0) {
			t.Errorf("%s: Moves gives %d partitions, want some: %v", tc.name, len(got), tc.some)
		}
		for p := range tc.cur.Snap.Partitions() {
			was, now := ownerOf(tc.old, p), holder(tc.cur, tc.self, p)
			held := holder(tc.old, was, p)
			want := ownerOf(tc.cur, p) == tc.self && now != "" && now != held && now != was
			if slices.Contains(got, p) != want {
				t.Errorf("%s: partition %d sent %v, want %v (owner %q, holder %q, then holder %q)", tc.name, p, !want, want, was, held, now)
			}
		}
	}
	// After a crash of a, b decides a's partitions whose replica it held;
	// c, their next holder, has none of them.
	bc := ringOf(t, "b", "c")
	crashed, n := Moves(abc, bc, "b"), 0
	for p := range bc.Snap.Partitions() {
		if ownerOf(abc, p) != "a" || holder(abc, "a", p) != "b" {
			continue
		}
		if n++; !slices.Contains(crashed, p) {
			t.Errorf("crash of a: partition %d, whose replica b held, is not sent to c", p)
		}
	}
	if n == 0 {
		t.Fatal("b held the replica of none of a's partitions: the case proves nothing")
	}
}

func TestMarks(t *testing.T) {
	t.Parallel()
	var m Marks
	if got := m.Take(8); got != nil {
		t.Fatalf("Take of no marks = %v, want nil", got)
	}
	m.Add([]int{1, 5})
	m.Add([]int{5, 9}) // two rebuilds before a round: one set, 9 past the ring's 8
	if got, want := m.Take(8), []bool{false, true, false, false, false, true, false, false}; !slices.Equal(got, want) {
		t.Fatalf("Take(8) = %v, want %v", got, want)
	}
	if got := m.Take(8); got != nil {
		t.Fatalf("Take after Take = %v, want nil", got)
	}
}
