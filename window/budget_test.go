package window

import (
	"fmt"
	"testing"
	"time"

	"github.com/shardlimiter/shardlimiter/limit"
	"github.com/shardlimiter/shardlimiter/table"
)

// TestLogChargesItsBudget: a log's buffer is charged to the table's byte
// budget as it grows, by takes and by imports, the budget evicts keys to
// stay under its bound, and every byte comes back when the keys go.
func TestLogChargesItsBudget(t *testing.T) {
	t.Parallel()
	const maxBytes = 256 << 10
	b := table.NewBudget(maxBytes)
	l := NewLog(table.Config{Budget: b})
	other := NewLog(table.Config{})
	r := limit.Rule{Algorithm: limit.SlidingLog, Limit: 1000, Period: time.Hour}
	now := int64(1_700_000_000) * int64(time.Second)
	for i := range 400 {
		key := fmt.Sprint("k", i)
		for j := range 100 { // 100 actions: a buffer of 128 runs, 2 KiB
			l.Take(key, now+int64(j), r, 1)
		}
		other.Take(key, now, r, 3)
		if st, ok := other.Export(key, now); ok {
			if err := l.Import(key, st, now+100, false); err != nil {
				t.Fatal(err)
			}
		}
		if b.Held() > maxBytes {
			t.Fatalf("after %d keys the budget holds %d bytes, over %d", i+1, b.Held(), maxBytes)
		}
		if b.Held() != l.Bytes() {
			t.Fatalf("after %d keys the table is charged %d bytes, the budget %d", i+1, l.Bytes(), b.Held())
		}
		now += int64(time.Millisecond) * 2
	}
	if l.EvictedForBytes() == 0 {
		t.Fatal("400 keys of over 2 KiB each in a 256 KiB budget: none was evicted for bytes")
	}
	if l.Bytes() < maxBytes/2 {
		t.Fatalf("the table holds only %d bytes of a %d budget: a charge is missing", l.Bytes(), maxBytes)
	}
	l.Range(func(key string) bool { l.Delete(key); return true })
	if l.Len() != 0 || l.Bytes() != 0 || b.Held() != 0 {
		t.Fatalf("after deleting every key: Len %d, Bytes %d, budget %d; want 0", l.Len(), l.Bytes(), b.Held())
	}
}
