package snapshot_test

import (
	"fmt"
	"os"

	"github.com/shardlimiter/shardlimiter/limit"
	"github.com/shardlimiter/shardlimiter/snapshot"
)

func Example() {
	dir, _ := os.MkdirTemp("", "snapshot")
	defer os.RemoveAll(dir)
	_, err := snapshot.Write(dir, "node-a", 1700000000e9, func(w *snapshot.Writer) error {
		return w.Write(limit.KeyState{Algorithm: limit.FixedWindow, Key: "account:42", State: []byte{1, 2, 3}})
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	info, err := snapshot.Load(dir, "node-a", func(ks limit.KeyState) error {
		fmt.Println(ks.Algorithm, ks.Key, ks.State)
		return nil
	})
	fmt.Println(info.Records, err)
	// Output:
	// FIXED_WINDOW account:42 [1 2 3]
	// 1 <nil>
}
