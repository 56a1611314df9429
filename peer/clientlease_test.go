package peer

import (
	"context"
	"testing"
	"time"

	"github.com/shardlimiter/shardlimiter/limit"
)

// A client process (LeaseRequest.Client, api/lease) is granted as a
// member is, though it is none; its records survive the prune of
// non-members until they expire, so its release is credited; and a client
// named as a member cannot release that member's grants.
func TestLeaseClientLessee(t *testing.T) {
	mv, _, clk, key, _ := leaseOwner(t)
	r := rule(limit.TokenBucket, 100, time.Hour)
	ctx := context.Background()
	if g, err := mv.lease(ctx, limit.LeaseRequest{From: "cn:app/1", Key: key, Rule: r, Want: 10}); err != nil || g.Hits != 0 {
		t.Fatalf("a non-member without Client was granted %+v, %v; want nothing", g, err)
	}
	g, err := mv.lease(ctx, limit.LeaseRequest{From: "cn:app/1", Client: true, Key: key, Rule: r, Want: 10})
	if err != nil || g.Hits != 10 || g.ID == 0 {
		t.Fatalf("client grant: %+v, %v; want 10 hits", g, err)
	}
	member, err := mv.lease(ctx, limit.LeaseRequest{From: "b", Key: key, Rule: r, Want: 10})
	if err != nil || member.Hits == 0 {
		t.Fatalf("member grant: %+v, %v", member, err)
	}
	if n, _ := mv.leases.lesseesOf(key, clk.Now().UnixNano(), mv.isLessee); n != 2 {
		t.Errorf("%d lessees of the key, want the client and b", n)
	}
	// Past a prune (once per TTL), before the records expire.
	clk.Advance(leaseTTL)
	if n, _ := mv.leases.lesseesOf(key, clk.Now().UnixNano(), mv.isLessee); n != 2 {
		t.Errorf("after a prune %d lessees of the key, want 2: a client's record is kept", n)
	}
	forged, err := mv.lease(ctx, limit.LeaseRequest{From: "b", Client: true, Key: key, Rule: r, Release: member.ID, Leftover: member.Hits})
	if err != nil || forged.Credited != 0 {
		t.Errorf("a client named b released b's grant: %+v, %v; want nothing credited", forged, err)
	}
	back, err := mv.lease(ctx, limit.LeaseRequest{From: "cn:app/1", Client: true, Key: key, Rule: r, Release: g.ID, Leftover: 4})
	if err != nil || back.Credited != 4 {
		t.Errorf("client release: %+v, %v; want 4 credited", back, err)
	}
}
