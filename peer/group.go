package peer

import (
	"hash/maphash"
	"sync"
	"time"

	"github.com/shardlimiter/shardlimiter/limit"
)

// Groups (limit.Check.Chained): checks on one key decided all or nothing.
//
// The owner decides a group in two steps under a lock of the group's key:
// a dry run that peeks every check (hits 0: reports the state, consumes
// nothing), then, only if each check would admit one hit and its remaining
// covers its hits, the real takes. The lock makes the two steps one: without it, two groups on one
// key could both pass their dry runs and then admit together more than
// either limit allows; with it, the dry run sees every hit an earlier group
// took. The locks are striped by key: groups of different keys rarely wait
// for each other, and no map of locks grows with the keys.
//
// A group whose checks all have limit.Overdraft counts every hit in every
// limit, admitted or not, so it needs no dry run: each check is taken in
// turn, under the lock, and the group is refused when any check refuses.
//
// Plain checks do not take the lock (they must stay as fast as they are).
// A plain check on a counter a group also uses (the same rule name and key
// sent without the group, which the RLS adapter never does) may slip in
// between a group's dry run and its takes; a take may then refuse after
// the dry run admitted. The group is then answered refused even though its
// earlier takes were counted: it errs toward admitting less, never more.

const groupStripes = 256

// groupLocks are the striped locks of groups, by unique key.
type groupLocks struct {
	seed    maphash.Seed
	stripes [groupStripes]struct {
		sync.Mutex
		_ [56]byte // one stripe per cache line
	}
}

func (g *groupLocks) lock(key string) *sync.Mutex {
	mu := &g.stripes[maphash.String(g.seed, key)%groupStripes].Mutex
	mu.Lock()
	return mu
}

// decideRun decides g, a plain check or a valid group, on this node's
// tables; out[i] answers g[i].
func (n *Node) decideRun(kb *keyBuf, g []limit.Check, out []limit.Result, now int64) {
	n.mv.changed()
	if len(g) == 1 {
		out[0] = n.decide(kb, &g[0], now)
		kb.tally.Record(&g[0], &out[0].Decision)
		return
	}
	n.decideGroup(kb, g, out, now)
	for i := range g {
		kb.tally.Record(&g[i], &out[i].Decision)
	}
}

// decideGroup decides a valid group all or nothing (see above). A refused
// group reports, in every check, the retry of the check that refused it
// with the longest wait: the group cannot pass before then.
func (n *Node) decideGroup(kb *keyBuf, g []limit.Check, out []limit.Result, now int64) {
	mu := n.groups.lock(g[0].Key)
	defer mu.Unlock()
	var buf [limit.MaxGroup]bool
	refused := buf[:len(g)]
	// A group whose checks all count every hit (limit.Overdraft) needs no
	// dry run: its takes count whether they admit or not.
	if (overdrafts(g) || n.dryRun(kb, g, out, refused, now)) && n.takeAll(kb, g, out, refused, now) {
		return
	}
	refuseGroup(g, out, refused, now)
}

// dryRun peeks every check of g into out and reports whether each would
// admit its hits; refused[i] says which would not.
func (n *Node) dryRun(kb *keyBuf, g []limit.Check, out []limit.Result, refused []bool, now int64) bool {
	admit := true
	for i := range g {
		c := &g[i]
		d := n.limiters[c.Rule.Algorithm].Take(kb.key(c.Name, c.Key), now, c.Rule, 0)
		out[i] = limit.Result{Decision: d, Owner: n.cfg.Name}
		// A peek answers as a one-hit check would: !d.Allowed also says
		// that a SLIDING_LOG's min_interval has not passed or a leaky
		// bucket's queue is full, which Remaining does not show.
		// Remaining < Hits catches the checks of several hits. Hits that
		// fail neither fit: a one-hit check passes and Hits are left.
		// A check of 0 hits is refused by nothing here (it counts nothing).
		refused[i] = c.Hits > 0 && !d.Allowed || d.Remaining < c.Hits
		admit = admit && !refused[i]
	}
	return admit
}

// takeAll takes every check of g into out and reports whether each
// admitted; refused[i] says which did not.
func (n *Node) takeAll(kb *keyBuf, g []limit.Check, out []limit.Result, refused []bool, now int64) bool {
	admit := true
	for i := range g {
		out[i] = n.decide(kb, &g[i], now)
		refused[i] = !out[i].Allowed
		admit = admit && !refused[i]
	}
	return admit
}

// overdrafts reports whether every check of g has limit.Overdraft.
func overdrafts(g []limit.Check) bool {
	for i := range g {
		if !g[i].Rule.Behavior.Has(limit.Overdraft) {
			return false
		}
	}
	return true
}

// refuseGroup answers every check of the refused group g refused, with
// the retry of the check that refused it with the longest wait.
func refuseGroup(g []limit.Check, out []limit.Result, refused []bool, now int64) {
	var retry time.Duration
	for i := range g {
		c, d := &g[i], &out[i].Decision
		switch {
		case !refused[i]:
		case c.Hits > c.Rule.Capacity() || d.RetryAfter == limit.Never:
			retry = limit.Never
		case retry != limit.Never:
			retry = max(retry, d.RetryAfter, time.Duration(d.ResetAt-now))
		}
	}
	for i := range out {
		out[i].Allowed, out[i].Delay, out[i].RetryAfter = false, 0, retry
	}
}
