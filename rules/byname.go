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
	missing, set := b.fill(checks)
	if missing < 0 {
		return b.Next.Check(ctx, checks)
	}
	res := make([]limit.Result, len(checks))
	if err := b.someUnnamed(ctx, checks, res, set); err != nil {
		return nil, err
	}
	return res, nil
}

// CheckerInto is a Checker that can answer into the caller's memory:
// transport.CheckerInto's method, declared here for the same reason as
// Checker.
type CheckerInto interface {
	CheckInto(ctx context.Context, checks []limit.Check, results []limit.Result) error
}

// CheckInto is Check into results, which has the length of checks and is
// zeroed (transport.CheckerInto). It hands them on to Next's CheckInto
// when Next has one.
func (b ByName) CheckInto(ctx context.Context, checks []limit.Check, results []limit.Result) error {
	missing, set := b.fill(checks)
	if missing < 0 {
		return b.checkInto(ctx, checks, results)
	}
	return b.someUnnamed(ctx, checks, results, set)
}

// fill gives each check that names a rule its rule, and returns the index
// of the first whose name the rules do not have (-1: none), and the rules
// it loaded (nil when no check named one).
func (b ByName) fill(checks []limit.Check) (int, *Set) {
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
	return missing, set
}

// someUnnamed answers the checks whose names are unknown in place in res
// and has Next decide the others.
func (b ByName) someUnnamed(ctx context.Context, checks []limit.Check, res []limit.Result, set *Set) error {
	unnamed := noRuleError(set)
	var idx []int
	var sub []limit.Check
	for i := range checks {
		c := &checks[i]
		if c.Rule.Limit == 0 && c.Rule.Period == 0 {
			res[i] = limit.Failed(limit.Invalid, unnamed(c.Name))
			continue
		}
		idx, sub = append(idx, i), append(sub, *c)
	}
	if len(sub) == 0 {
		return nil
	}
	out := make([]limit.Result, len(sub))
	if err := b.checkInto(ctx, sub, out); err != nil {
		return err
	}
	for j, i := range idx {
		res[i] = out[j]
	}
	return nil
}

// checkInto has Next decide checks into res: through its CheckInto, or
// its Check and a copy.
func (b ByName) checkInto(ctx context.Context, checks []limit.Check, res []limit.Result) error {
	if next, ok := b.Next.(CheckerInto); ok {
		return next.CheckInto(ctx, checks, res)
	}
	out, err := b.Next.Check(ctx, checks)
	if err != nil {
		return err
	}
	if len(out) != len(checks) {
		return fmt.Errorf("rules: node answered %d of %d checks", len(out), len(checks))
	}
	copy(res, out)
	return nil
}
