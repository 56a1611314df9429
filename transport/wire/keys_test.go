package wire

import (
	"fmt"
	"testing"
	"time"

	"github.com/shardlimiter/shardlimiter/limit"
)

// The keys of a decoded batch stay what they were when the Checks that
// held them is reset and reused for another batch: they share one string,
// not the reused buffer.
func TestDecodedKeysOutliveTheBatch(t *testing.T) {
	t.Parallel()
	first, second := benchChecks(50), benchChecks(50)
	for i := range second {
		second[i].Key = fmt.Sprintf("other:%06d", i)
	}
	// An invalid item in the middle: the keys of the items around it
	// must stay with their checks.
	first[7].Rule.Algorithm = limit.Algorithm(99)
	a, _ := AppendChecks(nil, first, nil)
	b, _ := AppendChecks(nil, second, nil)

	var c Checks
	if _, err := DecodeChecks(a, 100, &c); err != nil || len(c.Failed) != 1 || c.Failed[0].Index != 7 {
		t.Fatalf("DecodeChecks(first) = %v, failed %+v; want item 7 refused", err, c.Failed)
	}
	kept := make([]string, len(c.Checks))
	for i := range c.Checks {
		kept[i] = c.Checks[i].Key
	}
	c.Reset()
	if _, err := DecodeChecks(b, 100, &c); err != nil {
		t.Fatalf("DecodeChecks(second) = %v", err)
	}
	want := append(append([]limit.Check{}, first[:7]...), first[8:]...)
	for i, k := range kept {
		if k != want[i].Key {
			t.Errorf("key %d of the first batch = %q after decoding the second, want %q", i, k, want[i].Key)
		}
	}
	for i := range c.Checks {
		if c.Checks[i].Key != second[i].Key {
			t.Errorf("key %d of the second batch = %q, want %q", i, c.Checks[i].Key, second[i].Key)
		}
	}
}

// A batch of 100 checks of one rule decodes with one allocation for its
// keys and one for its rule name, whatever the number of keys. (An
// allocation count, not a timing: it is the same on any machine.)
func TestDecodeChecksAllocatesPerBatch(t *testing.T) {
	data, _ := AppendChecks(nil, benchChecks(100), nil)
	var c Checks
	if _, err := DecodeChecks(data, 100, &c); err != nil { // sizes c's memory
		t.Fatal(err)
	}
	allocs := testing.AllocsPerRun(20, func() {
		if _, err := DecodeChecks(data, 100, &c); err != nil {
			t.Fatal(err)
		}
	})
	if allocs > 2 {
		t.Errorf("DecodeChecks of 100 checks: %v allocations, want at most 2 (keys, name)", allocs)
	}
}

// Keys longer than the kept buffer still decode, and the buffer is not
// kept past Reset.
func TestDecodeChecksLongKeys(t *testing.T) {
	t.Parallel()
	checks := []limit.Check{{Name: "n", Key: string(make([]byte, maxKeptKeyBytes+1)), Hits: 1,
		Rule: limit.Rule{Algorithm: limit.TokenBucket, Limit: 1, Period: time.Second}}}
	data, _ := AppendChecks(nil, checks, nil)
	var c Checks
	if _, err := DecodeChecks(data, 1, &c); err != nil || len(c.Checks) != 1 || c.Checks[0].Key != checks[0].Key {
		t.Fatalf("DecodeChecks(long key) = %v, %d checks", err, len(c.Checks))
	}
	c.Reset()
	if cap(c.keyBytes) > maxKeptKeyBytes {
		t.Errorf("after Reset the key buffer keeps %d bytes, want at most %d", cap(c.keyBytes), maxKeptKeyBytes)
	}
}
