package peer

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/shardlimiter/shardlimiter/limit"
	"github.com/shardlimiter/shardlimiter/peer/leasing"
)

// Leases, the owner's side: the State service's Lease call, served by the
// state mover. The design, and why it is exact, is in docs/ARCHITECTURE.md
// ("Leases"); in short:
//
//   - a grant is a debit: granting n hits takes n hits from the key's
//     state (Limiter.Take), under deciding, as a forwarded check would. The
//     state that handoff, replication and snapshots move therefore carries
//     every outstanding lease, and a new owner never grants what an old
//     lease still holds;
//   - a grant is answered only once the debited state has reached the
//     key's replica holder (replicateGrant): an owner that crashes after a
//     grant leaves a replica that holds it;
//   - a release credits back what the lessee took out of use (its
//     leftover, which it never spends afterwards), at most the hits of the
//     lessee's grants of the key in this node's book, and removes those
//     records in the same step: no hit is credited twice;
//   - the book's records of a key travel with its state (a KeyState of
//     limit.LeaseBook beside the table's, in handoff, replication and
//     snapshots), so a release that reaches the key's new owner finds
//     them there; a node that no longer decides the key answers NotOwner
//     and the lessee releases to the owner it names. A release that finds
//     no record is dropped, and the hits stay spent (under-admission of at
//     most one lease, never over-admission).
//
// The lessee's side is leasehold.go.

const (
	// leaseTTL is how long a grant lives, from the lessee's request. A
	// lessee that crashes holds its hits unused for at most this long.
	leaseTTL = 500 * time.Millisecond
	// leaseGrace is how long past a grant's end its record is kept for
	// the lessee's release to find: the lessee stops deciding from it at
	// the TTL, and its release may take a while to arrive.
	leaseGrace = leaseTTL
	// leaseReplicaTimeout bounds the push of a debited state to the key's
	// replica holder before a grant is answered.
	leaseReplicaTimeout = 250 * time.Millisecond
	// leaseMinTTL is the shortest grant made: a window that ends sooner
	// is decided by its owner until the next one starts.
	leaseMinTTL = leaseTTL / 2
	// leaseHold is how long a node grants nothing of a partition whose
	// pull it answered without handing it over (its gossip had not heard
	// of the puller): the news of the join arrives within a gossip round
	// or two, and the rebuild then settles the partition.
	leaseHold = 5 * time.Second
	// leaseMaxRecords bounds the grants a node's book holds: past it, no
	// grant is made until some end.
	leaseMaxRecords = 1 << 16
)

// errNotLeasable answers a lease call for a rule that is not leased.
var errNotLeasable = errors.New("peer: only TOKEN_BUCKET, FIXED_WINDOW and SLIDING_WINDOW without warm-up or behaviors are leased")

// creditor is a table that can give back hits a lease did not use
// (bucket.TokenBucket, window.Fixed, window.Sliding).
type creditor interface {
	Credit(key string, now int64, r limit.Rule, hits int64) int64
}

// clientLessee prefixes, in the book, the name of a lessee that is a
// client process (LeaseRequest.Client): its records are kept until they
// expire, as it is no member.
const clientLessee = "\x00client/"

// isLessee reports whether the book keeps the records of lessee: a client
// or a member of the ring.
func (mv *mover) isLessee(lessee string) bool {
	return strings.HasPrefix(lessee, clientLessee) || mv.isMember(lessee)
}

// leaseRecord is one grant outstanding: this node's, or another's that
// came with the key's state (imported).
type leaseRecord struct {
	key, lessee string
	rule        limit.Rule
	hits        int64
	expires     int64 // Unix ns
	end         int64 // the end of the grant's window (Unix ns); 0 for none
	imported    bool  // granted by another node; not in held
}

// leaseBook holds the outstanding grants of the keys this node decides:
// those it made and those that came with a key's state. They are what a
// release is credited against; they travel with the key's state
// (export, importRecords) so that a release finds them at whichever node
// decides the key. All methods are safe for concurrent use.
type leaseBook struct {
	mu        sync.Mutex
	next      uint64                         // the last id given; guarded by mu
	recs      map[uint64]*leaseRecord        // guarded by mu
	lessees   map[string]map[string][]uint64 // key → lessee → its grants, in the order they came; guarded by mu
	held      int64                          // hits of this node's own recs; guarded by mu
	lastPrune int64                          // guarded by mu
	n         atomic.Int64                   // len(recs), read without mu
}

func newLeaseBook() *leaseBook {
	return &leaseBook{next: rand.Uint64() >> 1, recs: map[uint64]*leaseRecord{}, lessees: map[string]map[string][]uint64{}}
}

// add records a grant and returns its id.
func (b *leaseBook) add(rec *leaseRecord) uint64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	for {
		b.next++
		if b.next != 0 && b.recs[b.next] == nil { // not one that came from another node
			break
		}
	}
	b.insertLocked(b.next, rec)
	return b.next
}

func (b *leaseBook) insertLocked(id uint64, rec *leaseRecord) {
	b.recs[id] = rec
	b.n.Store(int64(len(b.recs)))
	if !rec.imported {
		b.held += rec.hits
	}
	m := b.lessees[rec.key]
	if m == nil {
		m = map[string][]uint64{}
		b.lessees[rec.key] = m
	}
	m[rec.lessee] = append(m[rec.lessee], id)
}

// take removes every grant of lessee on key that came to the book up to
// id, id included, provided id is one of them, and returns id's rule and
// the hits of those whose window, if any, has not ended at now
// (leasing.Creditable). A lessee pools the hits of its grants of a key,
// so what it gives back may come from any of them; a later grant, which
// may be on its way to the lessee, is kept for the lessee's next release.
// Grants that came with the key's state came before any this node made
// since (it decides the key only once they are here).
func (b *leaseBook) take(id uint64, lessee, key string, now int64) (r limit.Rule, hits int64, ok bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	rec := b.recs[id]
	if rec == nil || rec.lessee != lessee || rec.key != key {
		return r, 0, false
	}
	for _, x := range slices.Clone(b.lessees[key][lessee]) { // removeLocked edits the list
		if leasing.Creditable(b.recs[x].end, now) {
			hits += b.recs[x].hits
		}
		b.removeLocked(x, b.recs[x])
		if x == id {
			break
		}
	}
	return rec.rule, hits, true
}

// export appends to ks the records of key, as a KeyState of
// limit.LeaseBook, when it has any.
func (b *leaseBook) export(ks []limit.KeyState, key string) []limit.KeyState {
	if b.n.Load() == 0 {
		return ks
	}
	b.mu.Lock()
	var recs []leasing.Record
	for lessee, ids := range b.lessees[key] {
		for _, id := range ids {
			rec := b.recs[id]
			recs = append(recs, leasing.Record{ID: id, Lessee: lessee, Rule: rec.rule, Hits: rec.hits, Expires: rec.expires, End: rec.end})
		}
	}
	b.mu.Unlock()
	if len(recs) == 0 {
		return ks
	}
	if len(recs) > leasing.MaxRecords {
		recs = recs[:leasing.MaxRecords] // a record left behind under-admits, never over
	}
	return append(ks, limit.KeyState{Algorithm: limit.LeaseBook, Key: key, State: leasing.AppendRecords(nil, recs)})
}

// exportAll calls fn with the records of every key, as export encodes
// them (a snapshot).
func (b *leaseBook) exportAll(fn func(limit.KeyState) error) error {
	if b.n.Load() == 0 {
		return nil
	}
	b.mu.Lock()
	keys := make([]string, 0, len(b.lessees))
	for k := range b.lessees {
		keys = append(keys, k)
	}
	b.mu.Unlock()
	for _, k := range keys {
		for _, ks := range b.export(nil, k) {
			if err := fn(ks); err != nil {
				return err
			}
		}
	}
	return nil
}

// importRecords adds the records of key that came with its state, but
// those that have expired at now, those already in the book and those
// past its bound. It is called once the key's state is merged: a
// release may find a record only where the grant's debit is.
func (b *leaseBook) importRecords(key string, state []byte, now int64) error {
	recs, err := leasing.DecodeRecords(state)
	if err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, r := range recs {
		// An id the book holds is the same grant come again (a replica,
		// then the handoff), or another node's with the same number: the
		// book keeps its own, and a release of the other under-admits.
		if r.Expires <= now || b.recs[r.ID] != nil || len(b.recs) >= leaseMaxRecords {
			continue
		}
		b.insertLocked(r.ID, &leaseRecord{key: key, lessee: r.Lessee, rule: r.Rule, hits: r.Hits, expires: r.Expires, end: r.End, imported: true})
	}
	return nil
}

// takeOne removes the grant id of lessee on key alone, and returns its
// rule, hits and window end.
func (b *leaseBook) takeOne(id uint64, lessee, key string) (r limit.Rule, hits, end int64, ok bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	rec := b.recs[id]
	if rec == nil || rec.lessee != lessee || rec.key != key {
		return r, 0, 0, false
	}
	b.removeLocked(id, rec)
	return rec.rule, rec.hits, rec.end, true
}

func (b *leaseBook) removeLocked(id uint64, rec *leaseRecord) {
	delete(b.recs, id)
	b.n.Store(int64(len(b.recs)))
	if !rec.imported {
		b.held -= rec.hits
	}
	m := b.lessees[rec.key]
	ids := m[rec.lessee]
	for i, x := range ids {
		if x == id {
			ids = append(ids[:i], ids[i+1:]...)
			break
		}
	}
	if m[rec.lessee] = ids; len(ids) == 0 {
		delete(m, rec.lessee)
	}
	if len(m) == 0 {
		delete(b.lessees, rec.key)
	}
}

// lesseesOf returns how many nodes hold grants of key, and whether the
// book has room for one more grant. It drops the records that have
// expired (at most once per leaseTTL) and those of nodes that are not
// members any more (member reports whether a name is one).
func (b *leaseBook) lesseesOf(key string, now int64, member func(string) bool) (n int, room bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if now-b.lastPrune >= int64(leaseTTL) {
		b.lastPrune = now
		for id, rec := range b.recs {
			if rec.expires <= now || !member(rec.lessee) {
				b.removeLocked(id, rec)
			}
		}
	}
	return len(b.lessees[key]), len(b.recs) < leaseMaxRecords
}

// heldHits drops the grants that have expired at now and returns the hits
// of those outstanding.
func (b *leaseBook) heldHits(now int64) int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	for id, rec := range b.recs {
		if rec.expires <= now {
			b.removeLocked(id, rec)
		}
	}
	return b.held
}

// grantsOf returns the outstanding grants of key at now, pooled per
// lessee, sorted by lessee (Node.InspectLocal).
func (b *leaseBook) grantsOf(key string, now int64) []limit.LeaseView {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []limit.LeaseView
	for lessee, ids := range b.lessees[key] {
		l := limit.LeaseView{Lessee: lessee}
		for _, id := range ids {
			if rec := b.recs[id]; rec.expires-int64(leaseGrace) > now {
				l.Hits, l.Expires = l.Hits+rec.hits, max(l.Expires, rec.expires-int64(leaseGrace))
			}
		}
		if l.Hits > 0 {
			out = append(out, l)
		}
	}
	slices.SortFunc(out, func(a, b limit.LeaseView) int { return strings.Compare(a.Lessee, b.Lessee) })
	return out
}

// Lease serves State.Lease (api/peers.Leaser): a release of an earlier
// grant, then a grant, for a key this node decides.
func (n *Node) Lease(ctx context.Context, r limit.LeaseRequest) (limit.LeaseGrant, error) {
	return n.mv.lease(ctx, r)
}

// lease answers a lease call. The release and the grant are decided under
// deciding, for a key this node decides, as a forwarded check is; the
// grant's debit then goes to the key's replica holder before it is
// answered. Only another member of this node's ring is granted anything.
func (mv *mover) lease(ctx context.Context, r limit.LeaseRequest) (limit.LeaseGrant, error) {
	if !leasing.Leasable(r.Rule) {
		return limit.LeaseGrant{}, errNotLeasable
	}
	if r.Client {
		r.From = clientLessee + r.From // never a member's name
	}
	uk := uniqueKeyOf(r.Key)
	ho := mv.host.marks()
	if r.Release != 0 {
		// A release waits for the key's state when it is on its way here:
		// the lessee's records come with it.
		mv.waitIncoming(ctx, uk)
	}
	ho.deciding.RLock()
	v := mv.host.ringView()
	if owner := mv.host.decider(v, uk); owner != "" {
		ho.deciding.RUnlock()
		return limit.LeaseGrant{NotOwner: owner}, nil
	}
	if ho.kind(v.snap.PartitionOf(uk)) == partIncoming {
		// The key's state is on its way here (a join, a leave): a grant
		// debited from what this node holds now would be lost to the
		// merge with it (the larger consumption wins). Nothing is granted
		// or credited until it is here; the lessee forwards meanwhile,
		// and forwarded checks wait for the state.
		ho.deciding.RUnlock()
		return limit.LeaseGrant{}, nil
	}
	now := mv.cfg.Now().UnixNano()
	mv.changed() // a debit or a credit: the next snapshot is written
	var g limit.LeaseGrant
	if r.Release != 0 {
		g.Credited = mv.release(r, now)
	}
	if r.Want > 0 && mv.cfg.Leases && !mv.host.leaving() && (r.Client || v.snap.IndexOf(r.From) >= 0 && r.From != mv.cfg.Name) &&
		!mv.grantsHeld(v.snap.PartitionOf(uk), now) {
		g = mv.grantLocked(r, now, g)
	}
	ho.deciding.RUnlock()
	if g.Hits == 0 {
		return g, nil
	}
	if err := mv.replicateGrant(ctx, v, r.Rule.Algorithm, r.Key, uk); err != nil {
		// The replica holder did not take the debit: take the grant back
		// (while this node still decides the key; else the hits stay
		// spent) and grant nothing.
		mv.log.Debug("lease: replica of a grant failed; granting nothing", "err", err)
		mv.undoGrant(r, g.ID)
		return limit.LeaseGrant{Credited: g.Credited}, nil
	}
	mv.m.leaseGranted.Inc()
	return g, nil
}

// grantsHeld reports whether grants of partition p are refused at now: a
// pull of p was answered without marking it moved (holdGrants).
func (mv *mover) grantsHeld(p int, now int64) bool {
	mv.noGrantsMu.Lock()
	defer mv.noGrantsMu.Unlock()
	return now < mv.noGrants[p]
}

// waitIncoming waits, at most leaseCallTimeout or until ctx ends, for the
// state of uk's partition when it is on its way here.
func (mv *mover) waitIncoming(ctx context.Context, uk string) {
	chans := mv.host.marks().waitFor([]int{mv.host.ringView().snap.PartitionOf(uk)})
	if len(chans) == 0 {
		return
	}
	t := time.NewTimer(leaseCallTimeout)
	defer t.Stop()
	for _, ch := range chans {
		select {
		case <-ch:
		case <-t.C:
			return
		case <-ctx.Done():
			return
		}
	}
}

// release credits back what the lessee left of its grant r.Release. Under
// deciding, for a key this node decides.
func (mv *mover) release(r limit.LeaseRequest, now int64) int64 {
	rule, hits, ok := mv.leases.take(r.Release, r.From, r.Key, now)
	if !ok {
		return 0
	}
	cr, ok := mv.host.tables()[rule.Algorithm].(creditor)
	if !ok || r.Leftover <= 0 || hits <= 0 {
		return 0
	}
	got := cr.Credit(r.Key, now, rule, min(r.Leftover, hits))
	mv.m.leaseReleased.Inc()
	return got
}

// grantLocked sizes and debits a grant of key r.Key for r.From, or a deny
// lease when the key is over its limit. Under deciding, for a key this
// node decides.
func (mv *mover) grantLocked(r limit.LeaseRequest, now int64, g limit.LeaseGrant) limit.LeaseGrant {
	tb := mv.host.tables()[r.Rule.Algorithm]
	peek := tb.Take(r.Key, now, r.Rule, 0)
	if !peek.Allowed {
		if peek.RetryAfter >= time.Millisecond {
			// A deny lease lasts until one hit fits, at most a lease's
			// TTL: a credit back meanwhile (a lease released) is
			// then seen at the next ask.
			g.Deny = min(peek.RetryAfter, leaseTTL)
			mv.m.leaseDenied.Inc()
		}
		return g
	}
	lessees, room := mv.leases.lesseesOf(r.Key, now, mv.isLessee)
	size := leasing.Size(r.Want, peek.Remaining, r.Rule.Capacity(), lessees)
	ttl, end, long := leasing.TTL(r.Rule, now, leaseTTL, leaseMinTTL)
	if size == 0 || !room || !long {
		return g
	}
	if d := tb.Take(r.Key, now, r.Rule, size); !d.Allowed {
		return g // taken meanwhile
	}
	g.ID = mv.leases.add(&leaseRecord{key: r.Key, lessee: r.From, rule: r.Rule, hits: size, expires: now + int64(ttl+leaseGrace), end: end})
	g.Hits, g.TTL = size, ttl
	return g
}

// undoGrant credits back a grant whose debit did not reach the replica.
func (mv *mover) undoGrant(r limit.LeaseRequest, id uint64) {
	ho := mv.host.marks()
	ho.deciding.RLock()
	defer ho.deciding.RUnlock()
	rule, hits, end, ok := mv.leases.takeOne(id, r.From, r.Key)
	now := mv.cfg.Now().UnixNano()
	if !ok || !leasing.Creditable(end, now) || mv.host.decider(mv.host.ringView(), uniqueKeyOf(r.Key)) != "" {
		return
	}
	if cr, ok := mv.host.tables()[rule.Algorithm].(creditor); ok {
		cr.Credit(r.Key, now, rule, hits)
	}
}

// replicateGrant pushes key's debited state to its replica holder, the
// owner of the key in the ring without this node, and waits for the
// answer. Without replication, or alone, there is nothing to wait for.
func (mv *mover) replicateGrant(ctx context.Context, v *view, alg limit.Algorithm, key, uk string) error {
	if mv.cfg.ReplicationInterval <= 0 || v.backup == nil {
		return nil
	}
	st, ok := mv.host.tables()[alg].Export(key, mv.cfg.Now().UnixNano())
	if !ok {
		return nil
	}
	l, err := mv.host.link(v.backup.Owner(uk))
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, leaseReplicaTimeout)
	defer cancel()
	ks := mv.exportRecords(nil, alg, key) // the grant's record, with its debit
	return l.Push(ctx, limit.Replica, nil, append(ks, limit.KeyState{Algorithm: alg, Key: key, State: st}))
}
