package table_test

import (
	"fmt"

	"github.com/shardlimiter/shardlimiter/table"
)

// A counter per key that fits in one word, updated lock-free. A key whose
// count is back to zero is idle: the sweep may drop it, since a fresh
// entry reads the same.
func Example() {
	retire := func(e *table.Entry[struct{}], now int64) bool {
		return e.RetireWordIf(func(w int64) bool { return w == 0 })
	}
	t := table.New(table.Config{MaxKeys: 1000}, retire)

	add := func(key string, now, n int64) int64 {
		return table.UpdateWord(t, key, now, func(w int64) (int64, int64) { return w + n, w + n })
	}
	fmt.Println(add("account:42", 1, 1), add("account:42", 2, 1), add("account:7", 3, 5))
	fmt.Println(add("account:42", 4, -2), t.Len())

	// account:42 is back to zero: the sweep retires it, account:7 stays.
	fmt.Println(t.Sweep(5, 100), t.Len())
	// Output:
	// 1 2 5
	// 0 2
	// 1 1
}
