package rls

import (
	"context"

	"github.com/shardlimiter/shardlimiter/limit"
	"github.com/shardlimiter/shardlimiter/transport"
)

// decideAll has checker decide checks and returns their results, or the
// first item error as the call's error.
func decideAll(ctx context.Context, checker transport.Checker, checks []limit.Check) ([]limit.Result, error) {
	results, err := checker.Check(ctx, checks)
	if err == nil {
		err = resultsError(results, len(checks))
	}
	return results, err
}

// counted is how many descriptors of p can go over a limit: those with
// checks, and the blocked ones.
func (p *request) counted() int {
	n := 0
	for i := range p.descs {
		if k := p.descs[i].kind; k == checked || k == blocked {
			n++
		}
	}
	return n
}

// stopWhenOver decides p as envoyproxy/ratelimit does with
// STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT: it first reads every counter
// (a peek of each check), and when no descriptor's hits would take it
// over its limit, decides the checks as usual. Otherwise only the
// descriptors that go over count their hits (and answer OVER_LIMIT); the
// others count nothing and answer from what the peek read. Like the
// reference's read-then-increment, the two steps are not one: a request
// deciding the same counters in between can make an answer of the first
// step stale.
func stopWhenOver(ctx context.Context, checker transport.Checker, p *request) ([]limit.Result, error) {
	peeks := make([]limit.Check, len(p.checks))
	for i, c := range p.checks {
		c.Hits = 0
		peeks[i] = c
	}
	read, err := decideAll(ctx, checker, peeks)
	if err != nil {
		return nil, err
	}
	over := make([]bool, len(p.descs))
	anyOver := false
	for i := range p.descs {
		d := &p.descs[i]
		switch d.kind {
		case blocked:
			over[i] = d.hits > 0
		case checked:
			for j := d.first; j < d.first+d.n; j++ {
				over[i] = over[i] || !read[j].Allowed || read[j].Remaining < d.hits
			}
		}
		anyOver = anyOver || over[i]
	}
	if !anyOver {
		return decideAll(ctx, checker, p.checks)
	}
	var sub []limit.Check
	for i := range p.descs {
		if d := &p.descs[i]; over[i] && d.kind == checked {
			sub = append(sub, p.checks[d.first:d.first+d.n]...)
		}
	}
	if len(sub) == 0 {
		return read, nil // only blocked descriptors go over: they have no counter
	}
	taken, err := decideAll(ctx, checker, sub)
	if err != nil {
		return nil, err
	}
	for i := range p.descs {
		if d := &p.descs[i]; over[i] && d.kind == checked {
			copy(read[d.first:d.first+d.n], taken[:d.n])
			taken = taken[d.n:]
		}
	}
	return read, nil
}
