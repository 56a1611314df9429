package table

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// The index against a Go map, under random puts and deletes whose hashes
// crowd a few homes (long runs that wrap around the array's end) and often
// collide whole (different keys, one hash): after every step each key
// present is found, each key removed is not, and no key sits beyond an
// empty slot from its home.
func TestIndexAgainstMap(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	var x index[int]
	x.init()
	ref := map[string]*Entry[int]{}
	// 64 hashes in all, their homes near the two ends of the array, so
	// that runs wrap around and meet.
	hashes := map[string]uint64{}
	for n := range 300 {
		h := uint64(n%64) << 54
		if n%2 == 0 {
			h = ^h
		}
		hashes[fmt.Sprint("k", n)] = h
	}
	hashOf := func(k string) uint64 { return hashes[k] }
	names := make([]string, 0, len(hashes))
	for k := range hashes {
		names = append(names, k)
	}
	for step := range 4000 {
		k := names[r.IntN(len(names))]
		h := hashOf(k)
		if e, ok := ref[k]; ok && r.IntN(2) == 0 {
			if !x.del(h, k) {
				t.Fatalf("step %d: del(%s) found nothing", step, k)
			}
			delete(ref, k)
			_ = e
		} else if !ok {
			e := &Entry[int]{}
			x.put(h, k, e)
			ref[k] = e
		}
		checkIndex(t, &x, ref, names, hashOf)
	}
}

func checkIndex(t *testing.T, x *index[int], ref map[string]*Entry[int], names []string, hashOf func(string) uint64) {
	t.Helper()
	if x.n != len(ref) {
		t.Fatalf("n = %d, want %d", x.n, len(ref))
	}
	for k, e := range ref {
		if got := x.get(hashOf(k), k); got != e {
			t.Fatalf("get(%s) = %p, want %p", k, got, e)
		}
	}
	for _, k := range names {
		if _, ok := ref[k]; !ok && x.get(hashOf(k), k) != nil {
			t.Fatalf("get(%s) found a removed key", k)
		}
	}
	mask := len(x.slots) - 1
	for i, s := range x.slots {
		if s.e == nil {
			continue
		}
		for j := x.home(s.h); j != i; j = (j + 1) & mask {
			if x.slots[j].e == nil {
				t.Fatalf("%s at %d, home %d, after the empty slot %d", s.key, i, x.home(s.h), j)
			}
		}
	}
	seen := 0
	x.sample(0, x.n, func(k string, e *Entry[int]) bool {
		if ref[k] != e {
			t.Fatalf("sample gave %s, not held", k)
		}
		seen++
		return true
	})
	if seen != len(ref) {
		t.Fatalf("sample of all gave %d keys, want %d", seen, len(ref))
	}
}
