package rules

import (
	"context"
	"errors"
	"fmt"

	"github.com/shardlimiter/shardlimiter/limit"
)

// Checker decides a batch of checks, one result per check in order: what
// ByName hands its checks on to. transport.Checker is one; the interface is
// declared here so that rules needs no transport.
type Checker interface {
	Check(ctx context.Context, checks []limit.Check) ([]limit.Result, error)
}

// ByName lets the native API use the rules file: a check whose rule is
// zero (limit and duration_ms 0 on the wire) takes the rule of the rules
// file whose rate_limit name is the check's name. A name the rules do not
// have is an item error; the other checks go to Next unchanged. Its
// behavior flags (RESET, COUNT_REJECTED) are kept.
//
// ByName is a Checker (and a transport.Checker) for the client listeners
// only: checks reach peers with their rules filled in. It is safe for
// concurrent use.
type ByName struct {
	Rules *Store
	Next  Checker
}

// noRuleError returns the error of an item with limit 0 whose name set does
// not have. A node started without rules files (set nil) says so, rather
// than speak of a rules file it does not have.
func noRuleError(set *Set) func(name string) error {
	if set == nil {
		return func(string) error {
			return errors.New("limit must be > 0 (with duration_ms): this node has no rules file (--config) to take a rule from by name")
		}
	}
	return func(name string) error {
		return fmt.Errorf("limit is 0 and no rule is named %q in the rules file", name)
	}
}

// Check implements Checker.
func (b ByName) Check(ctx context.Context, checks []limit.Check) ([]limit.Result, error) {
	missing := -1
	var set *Set
	for i := range checks {
		c := &checks[i]
		if c.Rule.Limit != 0 || c.Rule.Period != 0 {
			continue
		}
		if set == nil && b.Rules != nil {
			set = b.Rules.Load()
		}
		r, ok := set.ByName(c.Name)
		if !ok {
			if missing < 0 {
				missing = i
			}
			continue
		}
		r.Behavior |= c.Rule.Behavior
		c.Rule = r
	}
	if missing < 0 {
		return b.Next.Check(ctx, checks)
	}
	// Some names are unknown: decide the others, answer those in place.
	unnamed := noRuleError(set)
	var idx []int
	var sub []limit.Check
	res := make([]limit.Result, len(checks))
	for i := range checks {
		c := &checks[i]
		if c.Rule.Limit == 0 && c.Rule.Period == 0 {
			res[i] = limit.Failed(limit.Invalid, unnamed(c.Name))
			continue
		}
		idx, sub = append(idx, i), append(sub, *c)
	}
	if len(sub) == 0 {
		return res, nil
	}
	out, err := b.Next.Check(ctx, sub)
	if err != nil {
		return nil, err
	}
	if len(out) != len(sub) {
		return nil, fmt.Errorf("rules: node answered %d of %d checks", len(out), len(sub))
	}
	for j, i := range idx {
		res[i] = out[j]
	}
	return res, nil
}
