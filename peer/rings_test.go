package peer

import (
	"context"
	"slices"
	"testing"
	"time"
)

// TestRings: a node asks every member of its ring for its ring. They
// agree while every ring has the same members; a member whose ring missed
// a join disagrees, and a member that stopped answers with an error.
func TestRings(t *testing.T) {
	t.Parallel()
	c := newTestCluster(t, 3, Config{})
	a := c.running()[0]
	fresh := func() RingsInfo {
		a.node.rings.mu.Lock()
		a.node.rings.at = time.Time{} // past RingsMaxAge
		a.node.rings.mu.Unlock()
		return a.node.Rings(context.Background())
	}
	got := fresh()
	if !got.Agree || len(got.Rings) != 3 || got.Members != a.node.Cluster().MembersFingerprint {
		t.Fatalf("Rings() of a settled cluster = %+v, want 3 rings that agree on %s", got, a.node.Cluster().MembersFingerprint)
	}
	for i, r := range got.Rings {
		if want := c.running()[i].name; r.Node != want || !r.Agrees || r.Error != "" || !r.Ready || !slices.Equal(r.MemberNames, []string{"node-0", "node-1", "node-2"}) {
			t.Errorf("Rings()[%d] = %+v, want %s agreeing, ready, with 3 members", i, r, want)
		}
	}
	if again := a.node.Rings(context.Background()); again.AskedAt != got.AskedAt {
		t.Errorf("Rings() within RingsMaxAge asked again (at %d, then %d)", got.AskedAt, again.AskedAt)
	}

	// node-1 does not hear of node-3's join: its ring is stale.
	b := c.running()[1]
	c.mu.Lock()
	b.deaf = true
	c.mu.Unlock()
	c.add()
	c.waitSettled()
	got = fresh()
	if got.Agree || len(got.Rings) != 4 {
		t.Fatalf("Rings() with node-1 stale = %+v, want 4 rings that disagree", got)
	}
	for _, r := range got.Rings {
		if want := r.Node != "node-1"; r.Agrees != want || r.Error != "" {
			t.Errorf("Rings() with node-1 stale: %+v, want agrees=%v", r, want)
		}
	}

	// node-2 stops without anyone being told: it cannot answer.
	c.crash(c.running()[2])
	got = fresh()
	for _, r := range got.Rings {
		if r.Node == "node-2" && (r.Error == "" || r.Agrees) {
			t.Errorf("Rings() of a stopped member = %+v, want an error", r)
		}
	}
}
