package sim

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
)

// Run on three members measures what it says: a join that moves about
// 1/4 of the keys and hands them over, a leave that hands some over,
// gossip bytes counted, one forward or more per batch; and the table
// has a column for it.
func TestRunMeasuresAJoinAndALeave(t *testing.T) {
	t.Parallel()
	r, err := Run(context.Background(), Options{Seed: 7}, Params{N: 3, K: 2000,
		Scenarios: []string{"idle", "forward", "join", "leave"}, Window: time.Second, Batches: 20})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Errors) > 0 {
		t.Fatalf("scenarios failed: %v", r.Errors)
	}
	if r.JoinMovedIdeal < 0.5 || r.JoinMovedIdeal > 2 {
		t.Errorf("join moved %.2f × the ideal 1/4 of the keys, want 0.5-2", r.JoinMovedIdeal)
	}
	if r.Join <= 0 || r.Leave <= 0 {
		t.Errorf("join agreed in %v, leave in %v: want both measured", r.Join, r.Leave)
	}
	if r.JoinHandoff.Keys == 0 || r.LeaveHandoff.Keys == 0 {
		t.Errorf("handoffs moved %d keys (join) and %d (leave): want both > 0", r.JoinHandoff.Keys, r.LeaveHandoff.Keys)
	}
	if r.GossipBytes <= 0 {
		t.Errorf("gossip %.0f B/s per member idle: nothing counted", r.GossipBytes)
	}
	if r.ForwardMsgs < 1 || r.ForwardMsgs > 2 {
		t.Errorf("%.1f forwards per batch of 100 entering one of 3 members, want 1-2", r.ForwardMsgs)
	}
	var b strings.Builder
	WriteTable(&b, []Report{r})
	if !strings.Contains(b.String(), "| N=3 |") || !strings.Contains(b.String(), "join: one ring") {
		t.Errorf("table:\n%s", b.String())
	}
}

// A member taken down on the GossipNet gets no packets and no streams;
// bytes sent are counted; a partition cuts across sides only.
func TestGossipNetDownAndPartition(t *testing.T) {
	t.Parallel()
	g := NewGossipNet(0)
	var ts []*gossipTransport
	for _, a := range []string{"10.0.0.1:7946", "10.0.0.2:7946", "10.0.0.3:7946"} {
		tr, err := g.Transport(a)(&memberlist.Config{})
		if err != nil {
			t.Fatal(err)
		}
		ts = append(ts, tr.(*gossipTransport))
	}
	if _, err := ts[0].WriteTo([]byte("hello"), ts[1].addr); err != nil {
		t.Fatal(err)
	}
	if p := <-ts[1].packets; string(p.Buf) != "hello" || p.From.String() != ts[0].addr {
		t.Fatalf("got %q from %s, want hello from %s", p.Buf, p.From, ts[0].addr)
	}
	if got := g.Sent(); got != 5 {
		t.Fatalf("Sent() = %d, want 5", got)
	}
	g.Partition(map[string]int{ts[2].addr: 1})
	if _, err := ts[0].DialTimeout(ts[2].addr, time.Second); err == nil {
		t.Fatal("dial across the partition succeeded")
	}
	ts[0].WriteTo([]byte("lost"), ts[2].addr)
	if len(ts[2].packets) != 0 {
		t.Fatal("a packet crossed the partition")
	}
	g.Heal()
	g.Down(ts[1].addr)
	if _, err := ts[0].DialTimeout(ts[1].addr, time.Second); err == nil {
		t.Fatal("dial to a member that is down succeeded")
	}
	conn, err := ts[0].DialTimeout(ts[2].addr, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	conn.Close()
}
