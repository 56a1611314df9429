package cowmap

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
)

func TestZeroMapIsEmptyAndUnbounded(t *testing.T) {
	var m Map[string, int]
	if _, ok := m.Load("a"); ok || m.Len() != 0 {
		t.Fatalf("zero Map: Load ok %v, Len %d; want empty", ok, m.Len())
	}
	for i := range 100 {
		if _, ok := m.LoadOrAdd(fmt.Sprint(i), func() (int, bool) { return i, true }); !ok {
			t.Fatalf("zero Map refused key %d: it has no bound", i)
		}
	}
	if v, ok := m.Load("42"); !ok || v != 42 || m.Len() != 100 {
		t.Errorf("Load(42) = %d, %v; Len %d; want 42, true, 100", v, ok, m.Len())
	}
}

func TestBound(t *testing.T) {
	m := New[string, int](2)
	binds := 0
	bind := func(v int) func() (int, bool) {
		return func() (int, bool) { binds++; return v, true }
	}
	for _, tc := range []struct {
		key    string
		val    int
		want   int
		wantOK bool
	}{
		{"a", 1, 1, true},
		{"b", 2, 2, true},
		{"c", 3, 0, false}, // full
		{"a", 9, 1, true},  // held: its first value, no bind
	} {
		v, ok := m.LoadOrAdd(tc.key, bind(tc.val))
		if v != tc.want || ok != tc.wantOK {
			t.Errorf("LoadOrAdd(%q) = %d, %v; want %d, %v", tc.key, v, ok, tc.want, tc.wantOK)
		}
	}
	if binds != 2 || m.Len() != 2 {
		t.Errorf("binds %d, Len %d; want 2, 2", binds, m.Len())
	}
	if _, ok := m.Load("c"); ok {
		t.Error("a key past the bound is held")
	}
}

func TestBindDeclines(t *testing.T) {
	m := New[string, *int](0)
	if v, ok := m.LoadOrAdd("x", func() (*int, bool) { return new(int), false }); ok || v != nil {
		t.Fatalf("declined bind: got %v, %v; want nil, false", v, ok)
	}
	if m.Len() != 0 {
		t.Errorf("Len %d after a declined bind, want 0", m.Len())
	}
}

// A reader holding the map it loaded keeps seeing it unchanged while keys
// are added: additions publish a copy.
func TestAddCopies(t *testing.T) {
	m := New[int, int](0)
	m.LoadOrAdd(1, func() (int, bool) { return 1, true })
	before := *m.cur.Load()
	m.LoadOrAdd(2, func() (int, bool) { return 2, true })
	if len(before) != 1 {
		t.Errorf("the published map changed in place: %v", before)
	}
}

// Concurrent adders of one key bind it once and all get its value.
func TestConcurrentBindOnce(t *testing.T) {
	m := New[string, int](0)
	var binds atomic.Int32
	var wg sync.WaitGroup
	got := make([]int, 8)
	for i := range got {
		wg.Go(func() {
			got[i], _ = m.LoadOrAdd("k", func() (int, bool) { return int(binds.Add(1)), true })
		})
	}
	wg.Wait()
	if binds.Load() != 1 {
		t.Errorf("bind ran %d times, want 1", binds.Load())
	}
	for i, v := range got {
		if v != 1 {
			t.Errorf("adder %d got %d, want 1", i, v)
		}
	}
}
