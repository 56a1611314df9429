package ring

import (
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"go.uber.org/goleak"
)

// TestRingConcurrentLoadStore swaps snapshots of different sizes behind an
// atomic pointer, as the node publishes them, under readers that route with
// whatever they loaded; -race checks the handoff.
// Each reader checks the snapshot it loaded is whole: an owner index within
// that snapshot's own member list, and the member list of its version.
// Not parallel, so that goleak sees only this test's goroutines.
func TestRingConcurrentLoadStore(t *testing.T) {
	defer goleak.VerifyNone(t)

	const versions = 6
	snaps := make([]*Snapshot, versions)
	for v := range snaps {
		s, err := New(namedMembers(3+v), uint64(v), Config{PartitionCount: 1021, ReplicationFactor: 20})
		if err != nil {
			t.Fatal(err)
		}
		snaps[v] = s
	}

	var r atomic.Pointer[Snapshot]
	r.Store(snaps[0])
	var stop atomic.Bool
	var wg sync.WaitGroup
	wg.Go(func() {
		defer stop.Store(true)
		for i := range 2000 {
			r.Store(snaps[i%versions])
		}
	})
	errs := make(chan string, 4)
	for g := range 4 {
		wg.Go(func() {
			for i := 0; i < 1000 || !stop.Load(); i++ { // overlap the writer, however it is scheduled
				s := r.Load()
				k := "account:" + strconv.Itoa(g*1_000_000+i)
				idx, owner := s.OwnerIndex(k), s.Owner(k)
				if idx >= s.Len() || owner != s.Member(idx) || s.Len() != 3+int(s.Version()) {
					errs <- "version " + strconv.FormatUint(s.Version(), 10) + ": inconsistent lookup of " + k
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
}
