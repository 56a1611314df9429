package server

import "testing"

// TestPartySharesTheBound: a Party counts among the bound's parties from
// Join to Leave, and takes beyond its share only while an eighth of the
// bound stays free.
func TestPartySharesTheBound(t *testing.T) {
	t.Parallel()
	b := NewFairInFlight(80)
	m := NewMetrics(nil)
	a, c := b.Join(m, ListenerRESP), b.Join(m, ListenerRESP)
	if got := b.Holders(); got != 2 {
		t.Fatalf("Holders = %d after two joins, want 2", got)
	}
	if !a.Acquire(60) {
		t.Fatal("a: Acquire(60) of 80 with nothing else in flight refused")
	}
	// c's share is 80/3 = 26; 60+26 > 80: refused, counted as a shed.
	if c.Acquire(26) {
		t.Fatal("c: Acquire(26) beyond the bound admitted")
	}
	if !c.Acquire(10) {
		t.Fatal("c: Acquire(10), within its share and the bound, refused")
	}
	c.Release()
	a.Release()
	if got := b.InUse(); got != 0 {
		t.Fatalf("InUse = %d after the releases, want 0", got)
	}
	a.Leave()
	c.Leave()
	if got := b.Holders(); got != 0 {
		t.Fatalf("Holders = %d after the leaves, want 0", got)
	}
	nilParty := (*InFlight)(nil).Join(m, ListenerRESP)
	if !nilParty.Acquire(1 << 40) {
		t.Fatal("a party of no bound refused")
	}
	nilParty.Release()
	nilParty.Leave()
}
