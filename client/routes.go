package client

import (
	"slices"
	"sync/atomic"
	"time"

	"github.com/shardlimiter/shardlimiter/ring"
	"github.com/shardlimiter/shardlimiter/transport/dial"
)

// suspendFor is how long a node whose call failed (unreachable, timed out)
// gets no checks of its own: they go to another node meanwhile. Gossip
// takes a few seconds to drop a dead node from the ring; until then each
// retry after suspendFor costs one failed call.
const suspendFor = time.Second

// dest is one node the client sends to.
type dest struct {
	bc        *dial.BatchClient
	downUntil atomic.Int64 // Unix ns; 0 or past: live
}

func (d *dest) live(now time.Time) bool {
	u := d.downUntil.Load()
	return u == 0 || now.UnixNano() >= u
}

func (d *dest) suspend() { d.downUntil.Store(time.Now().Add(suspendFor).UnixNano()) }

// routes is one ring and the node of each of its members: dests[i] serves
// snap.Member(i). Immutable once stored.
type routes struct {
	snap  *ring.Snapshot
	from  ring.Membership // what snap was built from
	dests []*dest
}

// route returns the node to send a check on key to: its owner when the
// ring knows it and it is live, else any live node.
func (c *Client) route(key string) *dest {
	r := c.routes.Load()
	if r == nil {
		return c.anyLive(nil)
	}
	d := r.dests[r.snap.OwnerIndex(key)]
	if d.downUntil.Load() != 0 && !d.live(time.Now()) {
		return c.anyLive(d)
	}
	return d
}

// anyLive picks, round robin, a live node other than not: a member of the
// ring, else a target; not itself when there is no other.
func (c *Client) anyLive(not *dest) *dest {
	now := time.Now()
	if r := c.routes.Load(); r != nil {
		if d := pick(r.dests, not, now, c.rr.Add(1)); d != nil {
			return d
		}
	}
	if d := pick(c.seeds, not, now, c.rr.Add(1)); d != nil {
		return d
	}
	if not != nil {
		return not
	}
	return c.seeds[0]
}

func pick(ds []*dest, not *dest, now time.Time, n uint64) *dest {
	for i := range ds {
		d := ds[(n+uint64(i))%uint64(len(ds))]
		if d != not && d.live(now) {
			return d
		}
	}
	return nil
}

// update installs the ring m, connecting to new members and closing the
// connections of members gone (their unanswered calls fail with
// transport.ErrClosed and are retried elsewhere, see do). Called by the
// watch goroutine only, so updates never race with each other.
func (c *Client) update(m ring.Membership) {
	if old := c.routes.Load(); old != nil && sameRing(old.from, m) {
		return
	}
	members := make([]ring.Member, 0, len(m.Members))
	for _, mb := range m.Members {
		if mb.Addr != "" {
			members = append(members, ring.Member{Name: mb.Name, Addr: mb.Addr})
		}
	}
	if len(members) != len(m.Members) {
		return // a member we could not send to: keep the ring we have
	}
	snap, err := ring.New(members, m.Version, m.Config)
	if err != nil {
		return // not a ring this version can build: keep the one we have
	}
	r := &routes{snap: snap, from: m, dests: make([]*dest, snap.Len())}
	c.mu.Lock()
	for i := range snap.Len() {
		if r.dests[i], err = c.destLocked(snap.Member(i).Addr); err != nil {
			c.mu.Unlock()
			return
		}
	}
	var gone []*dest
	for addr, d := range c.dests {
		if !slices.Contains(r.dests, d) && !slices.Contains(c.seeds, d) {
			gone = append(gone, d)
			delete(c.dests, addr)
		}
	}
	c.mu.Unlock()
	c.routes.Store(r)
	for _, d := range gone {
		_ = d.bc.Close()
	}
}

// sameRing reports whether a and b give the same owners and addresses.
func sameRing(a, b ring.Membership) bool {
	if a.Config != b.Config || len(a.Members) != len(b.Members) {
		return false
	}
	key := func(m ring.Member) string { return m.Name + "\x00" + m.Addr }
	x, y := make([]string, len(a.Members)), make([]string, len(b.Members))
	for i := range a.Members {
		x[i], y[i] = key(a.Members[i]), key(b.Members[i])
	}
	slices.Sort(x)
	slices.Sort(y)
	return slices.Equal(x, y)
}

// Members returns the names of the members of the ring the client routes
// with, sorted; nil while it has none (every check then goes to the
// targets).
func (c *Client) Members() []string {
	r := c.routes.Load()
	if r == nil {
		return nil
	}
	names := make([]string, r.snap.Len())
	for i := range names {
		names[i] = r.snap.Member(i).Name
	}
	return names
}
