package gubernator

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shardlimiter/shardlimiter/limit"
	"github.com/shardlimiter/shardlimiter/table"
)

var ns0 = t0 * int64(time.Millisecond) // t0 in Unix ns

func rule(alg limit.Algorithm, lim int64, d time.Duration) limit.Rule {
	return limit.Rule{Algorithm: alg, Limit: lim, Period: d}
}

func TestTableTakeAndSweep(t *testing.T) {
	t.Parallel()
	g := NewTable(table.Config{MaxKeys: 100})
	r := rule(tb, 2, 9*time.Second)
	if d := g.Take("k", ns0, r, 1); !d.Allowed || d.Remaining != 1 || d.ResetAt != ns0+9e9 {
		t.Fatalf("Take(k, t0, 1) = %+v", d)
	}
	// the leaky view takes from the same table: a leaky check replaces the token key
	if d := g.Leaky().Take("k", ns0, rule(lb, 10, 30*time.Second), 1); d.Remaining != 9 {
		t.Fatalf("Leaky().Take(k) = %+v, want remaining 9", d)
	}
	if n := g.Sweep(ns0+29e9, 100); n != 0 || g.Len() != 1 {
		t.Fatalf("Sweep before expiry removed %d, Len %d", n, g.Len())
	}
	if n := g.Sweep(ns0+31e9, 100); n != 1 || g.Len() != 0 {
		t.Fatalf("Sweep after expiry removed %d, Len %d", n, g.Len())
	}
}

func TestTableConservation(t *testing.T) {
	t.Parallel()
	g := NewTable(table.Config{})
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 200 {
				if g.Take("hot", ns0, rule(tb, 500, time.Minute), 1).Allowed {
					admitted.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if got := admitted.Load(); got != 500 {
		t.Errorf("admitted %d of 1600 under limit 500, want exactly 500", got)
	}
}

func TestTransferMerge(t *testing.T) {
	t.Parallel()
	a, b := NewTable(table.Config{}), NewTable(table.Config{})
	r := rule(tb, 10, time.Minute)
	a.Take("k", ns0, r, 7) // a: 3 left
	b.Take("k", ns0, r, 2) // b: 8 left
	st, ok := a.Export("k", ns0)
	if !ok {
		t.Fatal("Export(k) = !ok for a used key")
	}
	if err := b.Import("k", st, ns0, false); err != nil {
		t.Fatal(err)
	}
	if d := b.Take("k", ns0, r, 0); d.Remaining != 3 {
		t.Errorf("after merge remaining = %d, want 3 (the state that consumed more)", d.Remaining)
	}
	// the other way round keeps the receiver's
	st, _ = NewTableWith(t, r, 1).Export("k", ns0)
	if err := a.Import("k", st, ns0, false); err != nil {
		t.Fatal(err)
	}
	if d := a.Take("k", ns0, r, 0); d.Remaining != 3 {
		t.Errorf("merge of a less used state: remaining = %d, want 3", d.Remaining)
	}
	// an expired state is not exported, and yields on import
	if _, ok := a.Export("k", ns0+61e9); ok {
		t.Error("Export of an expired key = ok")
	}
	if err := a.Import("k", []byte{1, 9}, ns0, false); err == nil {
		t.Error("Import(garbage) = nil error")
	}
	// leaky round trip keeps the fractional balance
	l := NewTable(table.Config{})
	l.Take("q", ns0, rule(lb, 2000, time.Second), 1)
	st, _ = l.Export("q", ns0)
	in, err := decode(st)
	if err != nil || in.Kind != Leaky || in.Level != 1999 || in.Limit != 2000 {
		t.Errorf("decode(Export(leaky)) = %+v, %v", in, err)
	}
}

// NewTableWith returns a table whose key k took hits under r at t0.
func NewTableWith(t *testing.T, r limit.Rule, hits int64) *Table {
	t.Helper()
	g := NewTable(table.Config{})
	g.Take("k", ns0, r, hits)
	return g
}
