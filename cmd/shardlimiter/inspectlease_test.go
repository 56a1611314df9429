package main

import (
	"strings"
	"testing"
	"time"

	"github.com/shardlimiter/shardlimiter/limit"
)

// shardlimiter inspect key shows the owner's outstanding leases, one line
// per lessee.
func TestPrintViewShowsLeases(t *testing.T) {
	now := time.Unix(1000, 0)
	v := limit.KeyView{Node: "a", Held: true, Limit: 100, Decision: limit.Decision{Allowed: true, Remaining: 40},
		Leases: []limit.LeaseView{{Lessee: "b", Hits: 30, Expires: now.Add(300 * time.Millisecond).UnixNano()},
			{Lessee: "c", Hits: 20, Expires: now.Add(-time.Second).UnixNano()}}}
	var out strings.Builder
	printView(&out, "owner", v, now)
	for _, want := range []string{"  leased     30 hits to b, ending in 300ms\n", "  leased     20 hits to c, ending in 0s\n"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}
