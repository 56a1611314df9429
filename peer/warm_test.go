package peer

import (
	"testing"

	"github.com/shardlimiter/shardlimiter/limit"
)

// warmKeys gives, for the checks of one algorithm, the table keys that the
// takes will look up (kb.key), and leaves kb.key's buffer alone.
func TestWarmKeysAreTheTableKeys(t *testing.T) {
	checks := []limit.Check{
		{Name: "a", Key: "1", Rule: limit.Rule{Algorithm: limit.TokenBucket}},
		{Name: "bb", Key: "22", Rule: limit.Rule{Algorithm: limit.FixedWindow}},
		{Name: "a", Key: "333", Rule: limit.Rule{Algorithm: limit.TokenBucket}},
		{Name: "", Key: "", Rule: limit.Rule{Algorithm: limit.TokenBucket}},
	}
	var kb keyBuf
	held := kb.key("x", "y")
	got := kb.warmKeys(checks, limit.TokenBucket)
	var want []string
	for _, i := range []int{0, 2, 3} {
		var other keyBuf
		want = append(want, other.key(checks[i].Name, checks[i].Key))
	}
	if len(got) != len(want) {
		t.Fatalf("warmKeys = %q, want %q", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("warmKeys = %q, want %q", got, want)
		}
	}
	if held != "\x01xy" {
		t.Fatalf("kb.key's string changed to %q", held)
	}
}
