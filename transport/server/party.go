package server

// A Party is one long-lived client connection of a protocol that is
// neither gRPC nor HTTP (the Redis protocol's, package api/resp) sharing
// a fair bound as a gRPC connection does (fair.go): it counts among the
// bound's parties from Join to Leave, and what it takes is charged to it
// under the fair rule. A connection decides its commands one batch at a
// time, so a Party holds at most one batch's units.
//
// A Party is used by its connection's goroutine alone; Join and Leave
// take the bound's lock, Acquire and Release too on a fair bound.
type Party struct {
	t        ticket
	m        *Metrics
	listener int // listener* index, -1: not counted
}

// Join returns a party of b for a connection of listener (ListenerRESP;
// another name counts no shed), whose refusals m counts. On a nil b it
// returns nil, which admits everything.
func (b *InFlight) Join(m *Metrics, listener string) *Party {
	if b == nil {
		return nil
	}
	p := &Party{t: ticket{b: b, h: &holder{}}, m: m, listener: -1}
	for i, name := range listenerNames {
		if name == listener {
			p.listener = i
		}
	}
	if b.fair != nil {
		b.fair.mu.Lock()
		b.fair.joined++
		b.fair.mu.Unlock()
	}
	return p
}

// Acquire takes units (a batch of that many checks) for the party, or
// counts a shed and reports false. Every Acquire that succeeds is
// followed by one Release.
func (p *Party) Acquire(units int64) bool {
	if p == nil {
		return true
	}
	units = max(units, 1)
	b := p.t.b
	ok := false
	if b.fair == nil {
		if ok = b.TryAcquire(units); ok {
			p.t.units = units
		}
	} else {
		b.fair.mu.Lock()
		ok = b.takeLocked(&p.t, units)
		b.fair.mu.Unlock()
	}
	if !ok && p.listener >= 0 {
		p.m.shed(p.listener, shedChecks)
	}
	return ok
}

// Release gives back what the last Acquire took.
func (p *Party) Release() {
	if p != nil {
		p.t.release()
	}
}

// Leave ends the party: the connection is closed. It gives back anything
// still held.
func (p *Party) Leave() {
	if p == nil {
		return
	}
	p.Release()
	if f := p.t.b.fair; f != nil {
		f.mu.Lock()
		f.joined--
		f.mu.Unlock()
	}
}
