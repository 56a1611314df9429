package peer

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/shardlimiter/shardlimiter/limit"
)

// TestMemoryBudgetBoundsEveryTable floods a node with long keys in every
// algorithm's table. The tables together stay under their budget, keys are
// evicted for bytes and counted, a key in steady use keeps its exact count
// meanwhile, and the bytes go back to zero once the flood's keys are gone.
func TestMemoryBudgetBoundsEveryTable(t *testing.T) {
	t.Parallel()
	clk := newClock()
	const maxMemory = 8 << 20
	n, err := New(Config{Name: "solo", Now: clk.Now, MaxMemory: maxMemory})
	if err != nil {
		t.Fatal(err)
	}
	budget := TableBudget(maxMemory)
	if got := n.Memory().Budget; got != budget {
		t.Fatalf("Memory().Budget = %d, want %d", got, budget)
	}
	ctx := context.Background()
	steady := limit.Check{Name: "steady", Key: "account:42", Hits: 1, Rule: rule(limit.FixedWindow, 100, time.Hour)}
	pad := strings.Repeat("k", limit.MaxKeyLen-16)
	batch := make([]limit.Check, 0, 101)
	admitted := 0
	for i := range 200 {
		batch = batch[:0]
		for j := range 100 {
			a := limit.Algorithms()[(i*100+j)%len(limit.Algorithms())]
			batch = append(batch, limit.Check{Name: "flood", Key: fmt.Sprintf("%s%06d-%d", pad, i*100+j, a),
				Hits: 1, Rule: rule(a, 10, time.Second)})
		}
		if i%2 == 0 {
			batch = append(batch, steady)
		}
		res, err := n.Check(ctx, batch)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range res {
			if r.Error != "" {
				t.Fatalf("Check answered an item error %q", r.Error)
			}
		}
		if i%2 == 0 && res[len(res)-1].Allowed {
			admitted++
		}
		if held := n.Memory().Held; held > budget {
			t.Fatalf("after %d batches the tables hold %d bytes, over their budget of %d", i+1, held, budget)
		}
		clk.Advance(2 * time.Millisecond) // keeps LRU order: the steady key is always recent
	}
	if admitted != 100 {
		t.Errorf("the steady key admitted %d of 100 checks at limit 100 during the flood, want 100", admitted)
	}
	var byBytes, byKeys uint64
	for _, l := range n.limiters {
		byBytes += l.EvictedForBytes()
		byKeys += l.Evicted()
	}
	if byBytes == 0 || byKeys != 0 {
		t.Errorf("evictions for bytes %d, for keys %d; want > 0 and 0", byBytes, byKeys)
	}
	// Every flood key is idle a second later; a sweep frees them all.
	clk.Advance(2 * time.Hour)
	for _, l := range n.limiters {
		l.Sweep(clk.Now().UnixNano(), 1<<30)
	}
	if held := n.Memory().Held; held != 0 {
		t.Errorf("after the flood's keys expired and were swept the tables hold %d bytes, want 0", held)
	}
}
