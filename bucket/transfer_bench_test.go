package bucket

import (
	"fmt"
	"testing"
	"time"

	"github.com/shardlimiter/shardlimiter/limit"
	"github.com/shardlimiter/shardlimiter/table"
)

// The replication path of a token bucket table under a limit of 1000 per
// hour: 1000 keys of a 100,000-key table changed, then drained and
// exported (the sender's round), or imported into the replica holder's
// 100,000-key table (the receiver's push), one op per 1000 keys:
//
//	go test -run '^$' -bench 'ExportChanged1000|Import1000' -benchmem -count 6 ./bucket/

const benchReplKeys = 100_000

func benchReplTable(b *testing.B) (*TokenBucket, []string, limit.Rule) {
	b.Helper()
	l := NewTokenBucket(table.Config{TrackChanges: true})
	keys := make([]string, benchReplKeys)
	r := limit.Rule{Limit: 1000, Period: time.Hour}
	for i := range keys {
		keys[i] = fmt.Sprintf("account:%010d", i)
		l.Take(keys[i], t0, r, 1)
	}
	l.Changed(benchReplKeys, func(string) {})
	return l, keys, r
}

func BenchmarkExportChanged1000(b *testing.B) {
	l, keys, r := benchReplTable(b)
	n := 0
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		b.StopTimer()
		for j := range 1000 {
			l.Take(keys[(i*1000+j*97)%benchReplKeys], t0+int64(i), r, 1)
		}
		b.StartTimer()
		l.ExportChanged(1<<16, t0+int64(i), func(string, []byte) { n++ })
	}
	if n == 0 {
		b.Fatal("nothing exported")
	}
}

func BenchmarkImport1000(b *testing.B) {
	src, keys, r := benchReplTable(b)
	dst, _, _ := benchReplTable(b)
	dst.TrackChanges(false) // a replica holder marks nothing it imports
	var pushes [][]limit.KeyState
	for i := range 20 {
		var ks []limit.KeyState
		for j := range 1000 {
			k := keys[(i*1000+j*97)%benchReplKeys]
			src.Take(k, t0+1, r, 2)
			st, _ := src.Export(k, t0+1)
			ks = append(ks, limit.KeyState{Algorithm: limit.TokenBucket, Key: k, State: st})
		}
		pushes = append(pushes, ks)
	}
	b.Run("key-by-key", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			for _, k := range pushes[i%len(pushes)] {
				if err := dst.Import(k.Key, k.State, t0+1, false); err != nil {
					b.Fatal(err)
				}
			}
		}
	})
	b.Run("each", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			dst.ImportEach(pushes[i%len(pushes)], t0+1, false, func(_ int, err error) { b.Fatal(err) })
		}
	})
}
